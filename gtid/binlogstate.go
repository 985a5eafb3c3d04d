package gtid

import (
	"fmt"
	"strings"
)

// BinlogState is MariaDB's @@gtid_binlog_state: the last sequence number each server id wrote in
// each domain ("0-1-8,0-2-50,1-1-3"). Unlike a position it may name a domain more than once, so
// it is not a Set. The zero value is the empty state. Immutable after ParseBinlogState; safe for
// concurrent reads.
type BinlogState struct {
	last map[[2]uint32]uint64
	// maxSeq is the highest sequence number any server id wrote in each domain.
	maxSeq map[uint32]uint64
}

// ParseBinlogState parses @@gtid_binlog_state. Whitespace around elements and empty elements are
// ignored; an empty string is the empty state. On error the state is empty and the error names
// the malformed element. Pure.
func ParseBinlogState(s string) (BinlogState, error) {
	b := BinlogState{last: map[[2]uint32]uint64{}, maxSeq: map[uint32]uint64{}}
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		g, err := parseMariaDBGTID(part)
		if err != nil {
			return BinlogState{}, fmt.Errorf("gtid: parse binlog state %q: %w", s, err)
		}
		b.last[[2]uint32{g.Domain, g.Server}] = g.Seq
		b.maxSeq[g.Domain] = max(b.maxSeq[g.Domain], g.Seq)
	}
	return b, nil
}

// Last returns the last sequence number server id wrote in domain, and whether it wrote any
// there. Pure.
func (b BinlogState) Last(domain, server uint32) (uint64, bool) {
	n, ok := b.last[[2]uint32{domain, server}]
	return n, ok
}

// MaxSeq returns the highest sequence number any server id wrote in domain, 0 when none did. Pure.
func (b BinlogState) MaxSeq(domain uint32) uint64 { return b.maxSeq[domain] }
