package rocketmq_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/consumer/rmqpush"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/rocketmq"
)

// What the sink sends, the consumer kit's rmqpush.Message reads back byte for byte, for
// arbitrary bytes: the event id (from the event_id property, and from KEYS when the property
// is gone), the key and every header. The values favour what the "base64:" encoding must get
// right: empty, the protocol's separators 0x00-0x02, invalid UTF-8, spaces (KEYS separates
// keys with them) and text that itself starts with "base64:".
func TestConsumerReadsWhatTheSinkSends(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	alphabet := []string{"a", "Z", " ", "\x00", "\x01", "\x02", "\xff", "é", "base64:", "=", "/", "+"}
	value := func(min int) []byte {
		var b []byte
		for n := min + r.IntN(6); len(b) < n; {
			if r.IntN(3) == 0 {
				b = append(b, byte(r.IntN(256)))
			} else {
				b = append(b, alphabet[r.IntN(len(alphabet))]...)
			}
		}
		return b
	}
	for i := range 2000 {
		id := value(1)
		m := &sink.Message{Topic: "ORDER_PAID", Value: []byte("{}"), EventID: string(id),
			Headers: []sink.Header{{Key: "event_id", Value: id}, {Key: "h1", Value: value(0)}, {Key: "h2", Value: value(0)}}}
		if r.IntN(2) == 0 {
			m.Key = value(0)
		}
		wire, err := rocketmq.WireProperties(m)
		if err != nil {
			t.Fatalf("case %d: build: %v", i, err)
		}
		for _, keysOnly := range []bool{false, true} {
			ext := &primitive.MessageExt{MsgId: "M"}
			ext.Topic, ext.Body = m.Topic, m.Value
			ext.UnmarshalProperties([]byte(wire))
			if keysOnly {
				ext.RemoveProperty("event_id")
			}
			got, err := rmqpush.Message(ext)
			if err != nil {
				t.Fatalf("case %d (KEYS only %v): %v", i, keysOnly, err)
			}
			if got.EventID != m.EventID || !bytes.Equal(got.Key, m.Key) || (got.Key == nil) != (m.Key == nil) {
				t.Fatalf("case %d (KEYS only %v): event id %q key %q, sent %q %q", i, keysOnly, got.EventID, got.Key, m.EventID, m.Key)
			}
			want := m.Headers[1:]
			if !keysOnly {
				want = m.Headers
			}
			have := map[string][]byte{}
			for _, h := range got.Headers {
				have[h.Key] = h.Value
			}
			if len(have) != len(want) {
				t.Fatalf("case %d (KEYS only %v): headers %q, sent %q", i, keysOnly, got.Headers, want)
			}
			for _, h := range want {
				if v, ok := have[h.Key]; !ok || !bytes.Equal(v, h.Value) {
					t.Fatalf("case %d (KEYS only %v): header %s = %q, sent %q", i, keysOnly, h.Key, v, h.Value)
				}
			}
		}
	}
}
