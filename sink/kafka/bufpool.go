package kafka

import (
	"math/bits"
	"sync"
)

// Encoded record batches are recycled: allocating each afresh made the Go runtime zero it and
// the kernel fault its pages in before the records were copied over, and the garbage drove the
// GC. In the 100-row catch-up the batches were 23% of the bytes outboxd allocated and their
// encoding 15% of its CPU (bench/README.md, "Where the CPU goes").
//
// A buffer goes back only when no connection can still read it (seqBatch.leaked), and a pool
// keeps nothing the GC wants: sync.Pool drops idle buffers over two collections, so memory
// stays bounded by what is in flight.
const (
	minBufShift = 10 // 1 KiB, the smallest class: about one 1 KiB row with its headers
	maxBufShift = 23 // 8 MiB; a produce request is capped at 4 MiB (maxRequestBytes)
)

var bufClasses [maxBufShift - minBufShift + 1]sync.Pool

// bufClass is the class whose buffers hold size bytes: the smallest power of two ≥ size, from
// 1 KiB; ok is false above the largest class.
func bufClass(size int) (class int, ok bool) {
	shift := minBufShift
	if size > 1<<minBufShift {
		shift = bits.Len(uint(size - 1))
	}
	return shift - minBufShift, shift <= maxBufShift
}

// getBuf returns a buffer of length n and capacity at least size, recycled when one is free.
// Its bytes are not zeroed: the caller writes every byte it uses.
func getBuf(n, size int) []byte {
	c, ok := bufClass(size)
	if !ok {
		return make([]byte, n, size)
	}
	if p, _ := bufClasses[c].Get().(*[]byte); p != nil {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// putBuf gives b back for reuse. Nothing may read or write b afterwards.
func putBuf(b []byte) {
	c, ok := bufClass(cap(b))
	if !ok || cap(b) != 1<<(c+minBufShift) {
		return // not one of ours (a compressor's grown buffer): the GC has it
	}
	b = b[:0]
	bufClasses[c].Put(&b)
}
