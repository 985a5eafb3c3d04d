package rocketmq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// Nothing of a Send is written after its start plus SendTimeout, however many batches its
// queue needs: the HA lock's timing counts on a leader's sends ending within LongestSend of the
// Send its guard let start. Each answer here takes 300 ms of a 500 ms timeout: the first batch
// is answered, the second is cut off at the deadline, the third and fourth never go out (each
// request had its own timeout before, and all four were stored).
func TestSendWritesNothingAfterItsDeadline(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	const timeout = 500 * time.Millisecond
	s := newSink(t, c, func(cfg *Config) { cfg.SendTimeout = timeout; cfg.maxBatchMessages = 4 })
	topic := newTopic(c, 1)
	msgs := keyed(topic, []string{"k"}, 16)                        // one key, one queue: four batches in turn
	if err := s.Send(context.Background(), msgs[:1]); err != nil { // route and connection
		t.Fatalf("first Send: %v", err)
	}
	c.Inject(rocketmq.Fault{Topic: topic, Delay: 300 * time.Millisecond, Store: true, Count: 100})
	start := time.Now()
	err := s.Send(context.Background(), msgs[1:])
	took := time.Since(start)
	var se *sink.SendError
	if !errors.As(err, &se) {
		t.Fatalf("Send of four slow batches in a 500 ms timeout: %v; want the later ones failed", err)
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Fatalf("message %d failed for good: %v; a cut-off batch is to be resent", f.Index+1, f.Err)
		}
	}
	if took > timeout+200*time.Millisecond {
		t.Errorf("Send took %v, over its %v timeout", took, timeout)
	}
	time.Sleep(timeout) // anything still to be written would be by now
	if n := c.Stored(topic); n > 1+8 {
		t.Fatalf("%d messages stored: a batch was written after the Send's deadline (want at most the first message and two batches)", n)
	}
	if len(se.Failures) < 8 {
		t.Fatalf("%d messages failed; want at least the two batches never sent", len(se.Failures))
	}
}
