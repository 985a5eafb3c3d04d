package kafka

import (
	"time"

	"github.com/outboxd/outboxd/sink"
)

// batchOverhead is the fixed size of a v2 record batch header including the 12-byte log
// overhead (base offset and length); the broker compares this whole size with message.max.bytes.
const batchOverhead = 61

// maxVarintLen is the longest zig-zag varint, used when a timestamp delta is not known in advance.
const maxVarintLen = 10

// recordSize returns the encoded size of m as a v2 record (the same arithmetic as kafka-go's
// RecordSet.writeToVersion2), uncompressed. tsDelta is the record's timestamp minus the batch's
// first timestamp in milliseconds, or nil when unknown (a zero Time is stamped by kafka-go at
// encoding time), in which case the longest varint is assumed.
func recordSize(m *sink.Message, tsDelta *int64, offsetDelta int) int {
	n := recordBodySize(m, tsDelta, offsetDelta)
	return varintLen(int64(n)) + n
}

// recordBodySize is recordSize without the record's length prefix.
func recordBodySize(m *sink.Message, tsDelta *int64, offsetDelta int) int {
	n := 1 + // attributes
		varintLen(int64(offsetDelta)) +
		nullBytesLen(m.Key) +
		nullBytesLen(m.Value) +
		varintLen(int64(len(m.Headers)))
	if tsDelta != nil {
		n += varintLen(*tsDelta)
	} else {
		n += maxVarintLen
	}
	for _, h := range m.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + nullBytesLen(h.Value)
	}
	return n
}

// singleBatchSize is the size of a batch holding only m.
func singleBatchSize(m *sink.Message) int {
	var zero int64
	return batchOverhead + recordSize(m, &zero, 0)
}

// chunk splits idx (indexes into msgs, all for one partition, in send order) into consecutive
// runs whose encoded batch stays within maxBytes. A message that alone exceeds maxBytes was
// failed before this point; should one get here it forms a run of its own.
func chunk(msgs []*sink.Message, idx []int, maxBytes int) [][]int {
	var (
		out     [][]int
		cur     []int
		size    int
		firstTs int64
		firstOK bool
	)
	for _, i := range idx {
		m := msgs[i]
		if len(cur) == 0 {
			size = batchOverhead
			firstOK = !m.Time.IsZero()
			firstTs = millis(m.Time)
		}
		var delta *int64
		if firstOK && !m.Time.IsZero() {
			d := millis(m.Time) - firstTs
			delta = &d
		}
		rs := recordSize(m, delta, len(cur))
		if len(cur) > 0 && size+rs > maxBytes {
			out = append(out, cur)
			cur = nil
			size = batchOverhead
			firstOK = !m.Time.IsZero()
			firstTs = millis(m.Time)
			var zero int64
			if firstOK {
				delta = &zero
			}
			rs = recordSize(m, delta, 0)
		}
		cur = append(cur, i)
		size += rs
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func millis(t time.Time) int64 { return t.UnixMilli() }

func nullBytesLen(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the length of x as a zig-zag varint.
func varintLen(x int64) int {
	u := uint64(x<<1) ^ uint64(x>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// SingleBatchSize is the encoded, uncompressed size of a v2 record batch holding only m, as the
// broker compares it with message.max.bytes: a message above the limit can never be produced,
// by this sink or by another producer of the same cluster (sink/kafkatxn). Pure.
func SingleBatchSize(m *sink.Message) int { return singleBatchSize(m) }
