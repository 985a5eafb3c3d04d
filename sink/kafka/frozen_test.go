package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

// A batch taken into a request after its Send's start plus Timeout is never written: the HA
// lock's timing counts on a leader's sends ending within LongestSend of the Send its guard let
// start. The chaos run that found it froze a leader (SIGSTOP) while its batches waited for a
// request slot; they went out when it resumed, 2 s into the next leader's term. Here the
// combiner's clock jumps past the deadline between the Send's start and the take, as a freeze
// there would; with the clock right again the same messages go out.
func TestBatchNotWrittenAfterItsSendsDeadline(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%v", idem), func(t *testing.T) {
			e := newEnv(t)
			const timeout = time.Second
			s := e.sink(t, func(c *Config) { c.Idempotent = idem; c.Timeout = timeout })
			topic := e.topic(t, 3)
			var produces atomic.Int32
			e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				if hasTopic(kreq.(*kmsg.ProduceRequest), topic, -1) {
					produces.Add(1)
				}
				e.c.KeepControl()
				return nil, nil, false
			})
			msgs := keyed(topic, 30, func(i int) string { return fmt.Sprint("k", i) })
			if err := s.Send(context.Background(), msgs[:1]); err != nil { // metadata, producer id
				t.Fatalf("first Send: %v", err)
			}
			before := produces.Load()
			s.combine.mu.Lock()
			s.combine.now = func() time.Time { return time.Now().Add(timeout + time.Millisecond) }
			s.combine.mu.Unlock()
			err := s.Send(context.Background(), msgs[1:])
			var se *sink.SendError
			if !errors.As(err, &se) || len(se.Failures) != len(msgs)-1 {
				t.Fatalf("Send past its deadline: %v; want every message failed", err)
			}
			for _, f := range se.Failures {
				if sink.IsPermanent(f.Err) || !errors.Is(f.Err, errNotSent) {
					t.Fatalf("message %d: %v; want a transient not-sent error", f.Index, f.Err)
				}
			}
			if n := produces.Load() - before; n != 0 {
				t.Fatalf("%d produce requests reached the broker after the Send's deadline", n)
			}
			s.combine.mu.Lock()
			s.combine.now = time.Now
			s.combine.mu.Unlock()
			if err := s.Send(context.Background(), msgs[1:]); err != nil {
				t.Fatalf("resend with the clock right: %v", err)
			}
			if got := e.read(t, topic, len(msgs)); len(got) != len(msgs) {
				t.Fatalf("read %d records, want %d", len(got), len(msgs))
			}
		})
	}
}
