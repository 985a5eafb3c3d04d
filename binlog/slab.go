package binlog

import "slices"

// eventSlab cuts the event slices of successive transactions from shared blocks, so a 1-row
// transaction costs no allocation of its own and a transaction's second rows event extends its
// slice in place instead of growing it by a copy. In the 100-row catch-up the growth was 19% of
// the bytes outboxd allocated (bench/README.md, "Where the CPU goes").
//
// A transaction's slice has no spare capacity, so an append anywhere else cannot reach the
// next transaction's events. A block lives while any of its transactions is in flight, with
// the binlog buffers its events alias: at most about one block (slabEvents events) beyond the
// events the pipeline's capacity counts.
type eventSlab struct {
	block []Event // the current block; block[used:] is free
	used  int
}

// slabEvents is a block's size in events (about 180 KiB).
const slabEvents = 512

// grow returns cur with room for n more events, taking it from the current block when it fits:
// in place when cur is the block's last slice, else as a new slice there (cur copied).
// Slices larger than half a block are allocated on their own, growing as append grows.
func (s *eventSlab) grow(cur []Event, n int) []Event {
	need := len(cur) + n
	if need > slabEvents/2 {
		return slices.Grow(cur, n) // amortized, as append grows: a large transaction is not copied per rows event
	}
	if s.last(cur) && s.used-cap(cur)+need <= len(s.block) {
		start := s.used - cap(cur)
		s.used = start + need
		return s.block[start : start+len(cur) : s.used]
	}
	if len(s.block)-s.used < need {
		s.block, s.used = make([]Event, slabEvents), 0
	}
	out := s.block[s.used : s.used+len(cur) : s.used+need]
	copy(out, cur)
	s.used += need
	return out
}

// last reports whether cur is the slice most recently cut from the current block, ending where
// its free part begins.
func (s *eventSlab) last(cur []Event) bool {
	if cap(cur) == 0 || s.used == 0 {
		return false
	}
	return &cur[:cap(cur)][cap(cur)-1] == &s.block[s.used-1]
}
