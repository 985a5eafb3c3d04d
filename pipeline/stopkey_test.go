package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// cascadeSink fails a message's same-key followers in a call as the real sinks do, with a
// transient "not sent" error (sink.CascadeByKey), where memSink gives them the leader's error.
type cascadeSink struct{ *memSink }

var errNotSent = errors.New("not sent: an earlier message of its key failed")

func (c *cascadeSink) Send(ctx context.Context, msgs []*sink.Message) error {
	errs := make([]error, len(msgs))
	c.mu.Lock()
	if c.attempts == nil {
		c.attempts = map[string]int{}
	}
	for i, m := range msgs {
		c.attempts[m.EventID]++
		if c.fail != nil {
			errs[i] = c.fail(m, c.attempts[m.EventID])
		}
	}
	sink.CascadeByKey(msgs, errs, errNotSent)
	for i, m := range msgs {
		if errs[i] == nil {
			c.stored = append(c.stored, m)
		}
	}
	c.mu.Unlock()
	return sink.Collect(errs, nil)
}

// Under on_poison: stop, a row the broker refuses for good (or whose topic never appears)
// ends the run; the later rows of its key must not be delivered before it stops. Otherwise
// the operator's fix (raise the broker's limit, create the topic) and a restart deliver the
// row after its followers: the key's order is broken.
func TestStopHoldsTheKeyOfTheRowItStopsOn(t *testing.T) {
	t.Run("rejected", func(t *testing.T) {
		s := &memSink{fail: func(m *sink.Message, _ int) error {
			if m.EventID == "1" {
				return sink.Permanent(errors.New("message too large"))
			}
			return nil
		}}
		testStopHoldsKey(t, s, 0)
	})
	t.Run("topic missing", func(t *testing.T) {
		var missing sync.Map
		missing.Store("typo", true)
		testStopHoldsKey(t, &memSink{fail: missingTopics(&missing)}, 50*time.Millisecond)
	})
}

func testStopHoldsKey(t *testing.T, s *memSink, wait time.Duration) {
	saver := &memSaver{}
	p := newTestPipeline(t, &cascadeSink{s}, saver, PoisonStop)
	if wait > 0 {
		p.cfg.MissingTopicWait = wait
	}
	err := runAll(t, p, txn(1, "a:1@typo", "a:2", "b:3"))
	var pe *PoisonError
	if !errors.As(err, &pe) || pe.EventID != "1" {
		t.Fatalf("Run = %v, want a PoisonError for event 1", err)
	}
	if got := s.keyOrder("a"); got != "" {
		t.Fatalf("key a stored %q before the stop on its event 1, want nothing", got)
	}
	if !strings.Contains(sortedIDs(s), "t/3") {
		t.Fatalf("key b not delivered: stored %q", sortedIDs(s))
	}
	if got := saver.last(); got != "" {
		t.Fatalf("checkpoint %q, want none past the stop", got)
	}
}
