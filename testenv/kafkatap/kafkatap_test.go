package kafkatap

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// frame builds a request frame with a header v1 and body.
func frame(key, version int16, corr int32, clientID string, body []byte) []byte {
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// Frames split at every possible byte boundary, and several frames in one chunk, parse the same.
func TestFrameReaderSplits(t *testing.T) {
	stream := append(frame(3, 12, 7, "meta", []byte{1, 2, 3}), frame(0, 9, 8, "relay-a", make([]byte, 300))...)
	stream = append(stream, frame(18, 3, 9, "", nil)...)
	for step := 1; step <= len(stream); step++ {
		var fr frameReader
		var got []Request
		t0 := time.Unix(100, 0)
		for i := 0; i < len(stream); i += step {
			got = append(got, fr.feed(stream[i:min(i+step, len(stream))], t0.Add(time.Duration(i)))...)
		}
		if len(got) != 3 {
			t.Fatalf("step %d: %d requests, want 3: %+v", step, len(got), got)
		}
		want := []Request{{APIKey: 3, APIVersion: 12, CorrelationID: 7, ClientID: "meta"},
			{APIKey: 0, APIVersion: 9, CorrelationID: 8, ClientID: "relay-a"}, {APIKey: 18, APIVersion: 3, CorrelationID: 9}}
		for i, w := range want {
			g := got[i]
			if g.APIKey != w.APIKey || g.APIVersion != w.APIVersion || g.CorrelationID != w.CorrelationID || g.ClientID != w.ClientID {
				t.Fatalf("step %d: request %d is %+v, want %+v", step, i, g, w)
			}
			if g.Forwarded.Before(g.Began) {
				t.Fatalf("step %d: forwarded before it began: %+v", step, g)
			}
		}
		// The produce frame ends 300 bytes after its header: its last chunk is its Forwarded.
		if step == 1 && got[1].Forwarded.Sub(got[1].Began) < 300 {
			t.Fatalf("produce forwarded %s after it began, want its whole length", got[1].Forwarded.Sub(got[1].Began))
		}
	}
}

// A real producer behind the tap: its Produce requests are recorded under its client id, and
// none under another's.
func TestTapAttributesProduces(t *testing.T) {
	c, tap, err := Start(kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	defer c.Close()
	if c.ListenAddrs()[0] != tap.Addr() {
		t.Fatalf("kfake advertises %s, want the tap %s", c.ListenAddrs()[0], tap.Addr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(tap.Addr()), kgo.ClientID("relay-a"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	before := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ps := tap.Produces("relay-a", before)
	if len(ps) != 3 {
		t.Fatalf("%d produces recorded for relay-a, want 3; all: %+v", len(ps), tap.Requests())
	}
	if n := len(tap.Produces("relay-b", time.Time{})); n != 0 {
		t.Fatalf("%d produces for a client that sent none", n)
	}
	if n := len(tap.Produces("relay-a", time.Now())); n != 0 {
		t.Fatalf("%d produces after the last one", n)
	}
}
