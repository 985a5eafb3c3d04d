package cleanup

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
)

// key is the primary key of one delivered row, copied out of the binlog event (its strings and
// bytes alias the event's buffer, which the queue must not keep alive), with the event_id the
// DELETE also matches, so a key reused by a later row is never taken for this one.
type key struct {
	sess    *session
	seq     uint64
	vals    []any
	eventID string
}

// ready reports whether a saved checkpoint covers the key's transaction.
func (k *key) ready() bool { return k.seq < k.sess.saved.Load() }

// queue is one table's bounded queue of keys waiting for the checkpoint. Lanes push (one lock
// per send), the table's loop takes what is ready. Safe for concurrent use.
type queue struct {
	mu   sync.Mutex
	keys []key
	cap  int
	// maxBytes bounds the keys' memory (size), for keys of a wide primary key; 0: no bound.
	maxBytes int
	bytes    int
	// dropped counts keys refused because the queue was full, not yet reported.
	dropped atomic.Int64
}

// push appends ks, dropping those beyond the capacity in keys or bytes (counted in dropped).
func (q *queue) push(ks []key) {
	q.mu.Lock()
	room := max(q.cap-len(q.keys), 0)
	n := 0
	for n < min(room, len(ks)) {
		sz := ks[n].size()
		if q.maxBytes > 0 && q.bytes+sz > q.maxBytes {
			break
		}
		q.bytes += sz
		n++
	}
	if n < len(ks) {
		q.dropped.Add(int64(len(ks) - n))
	}
	q.keys = append(q.keys, ks[:n]...)
	q.mu.Unlock()
}

// size approximates the memory a queued key holds.
func (k *key) size() int {
	n := 64 + len(k.eventID) // the key, its slice header and the string header
	for _, v := range k.vals {
		n += 16 // the interface
		switch x := v.(type) {
		case string:
			n += len(x)
		case []byte:
			n += len(x)
		default:
			n += 8
		}
	}
	return n
}

// take removes up to n keys whose transaction a saved checkpoint covers, oldest first; keys
// of an ended session that its last save did not cover are dropped (that session's successor
// reads those rows again and queues them anew).
func (q *queue) take(n int, current *session) []key {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []key
	kept := q.keys[:0]
	for i := range q.keys {
		k := q.keys[i]
		switch {
		case len(out) < n && k.ready():
			out = append(out, k)
			q.bytes -= k.size()
		case k.sess != current && k.sess.ended.Load() && !k.ready():
			// never covered: read again by the next session
			q.bytes -= k.size()
		default:
			kept = append(kept, k)
		}
	}
	clear(q.keys[len(kept):])
	q.keys = kept
	return out
}

// len is the number of keys queued.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys)
}

// ownValue copies a decoded binlog value so it no longer aliases the event's buffer.
func ownValue(v any) any {
	switch x := v.(type) {
	case string:
		return strings.Clone(x)
	case []byte:
		return bytes.Clone(x)
	}
	return v // numbers, time.Time, decimals: values of their own
}
