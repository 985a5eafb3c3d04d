package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/sink"
)

// missingTopics fails every message for a topic in missing with a topic-missing error, as the
// sinks do for a topic the broker does not know.
func missingTopics(missing *sync.Map) func(m *sink.Message, _ int) error {
	return func(m *sink.Message, _ int) error {
		if _, ok := missing.Load(m.Topic); ok {
			return sink.TopicMissing(errors.New("topic " + m.Topic + " does not exist"))
		}
		return nil
	}
}

func TestMissingTopicStallsItsKeyThenDelivers(t *testing.T) {
	var missing sync.Map
	missing.Store("late", true)
	s, saver := &memSink{fail: missingTopics(&missing)}, &memSaver{}
	p := newTestPipeline(t, s, saver, PoisonStop)
	p.cfg.MissingTopicWait = time.Minute
	in := make(chan *binlog.Txn, 3)
	in <- txn(1, "a:1@late")
	in <- txn(2, "b:2")      // another key: not held
	in <- txn(3, "a:3@late") // same key as 1: must not overtake it
	close(in)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background(), in) }()

	deadline := time.Now().Add(5 * time.Second)
	for len(p.MissingTopics()) == 0 || !strings.Contains(sortedIDs(s), "t/2") {
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported (%v) or key b not delivered (%q)", p.MissingTopics(), sortedIDs(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	mt := p.MissingTopics()
	if len(mt) != 1 || mt[0].Sink != "main" || mt[0].Topic != "late" || mt[0].DeadLetter || mt[0].Since.IsZero() {
		t.Fatalf("MissingTopics = %+v, want main/late", mt)
	}
	if got := saver.last(); got != "" {
		t.Fatalf("checkpoint %q while transaction 0-1-1 waits for its topic", got)
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the topic is missing", err)
	default:
	}
	missing.Delete("late") // the operator creates the topic
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := s.keyOrder("a"), "1 3"; got != want {
		t.Fatalf("key a stored in order %q, want %q", got, want)
	}
	if got, want := sortedIDs(s), "late/1 late/3 t/2"; got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if got := p.MissingTopics(); len(got) != 0 {
		t.Fatalf("MissingTopics after delivery = %+v", got)
	}
	if saver.last() != "0-1-3" {
		t.Fatalf("checkpoint %q, want 0-1-3", saver.last())
	}
}

func TestMissingTopicTimeout(t *testing.T) {
	var missing sync.Map
	missing.Store("typo", true)
	t.Run("stop", func(t *testing.T) {
		s, saver := &memSink{fail: missingTopics(&missing)}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonStop)
		p.cfg.MissingTopicWait = 100 * time.Millisecond
		began := time.Now()
		err := runAll(t, p, txn(1, "a:1"), txn(2, "a:2@typo"), txn(3, "b:3"))
		var pe *PoisonError
		if !errors.As(err, &pe) || pe.EventID != "2" || !strings.Contains(err.Error(), "topic typo") ||
			!strings.Contains(err.Error(), "retry.missing_topic_timeout") || !sink.IsTopicMissing(err) {
			t.Fatalf("Run = %v, want a PoisonError for event 2 naming the topic and the timeout", err)
		}
		if waited := time.Since(began); waited < 100*time.Millisecond {
			t.Fatalf("gave up after %s, before the timeout", waited)
		}
		if got := saver.last(); got != "0-1-1" {
			t.Fatalf("checkpoint %q, want 0-1-1: up to the row whose topic is missing, not past it", got)
		}
	})
	t.Run("dead_letter", func(t *testing.T) {
		s, saver := &memSink{fail: missingTopics(&missing)}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonDeadLetter)
		// One lane, batches of at most 3: event 5 is never in the batch of event 2.
		cfg := p.cfg
		cfg.MissingTopicWait, cfg.Lanes, cfg.MaxBatchEvents = 100*time.Millisecond, 1, 3
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := runAll(t, p, txn(1, "a:1"), txn(2, "a:2@typo", "c:4@typo"), txn(3, "b:3"), txn(4, "d:5@typo")); err != nil {
			t.Fatal(err)
		}
		if got, want := sortedIDs(s), "dlq/2 dlq/4 dlq/5 t/1 t/3"; got != want {
			t.Fatalf("stored %q, want %q", got, want)
		}
		if saver.last() != "0-1-4" {
			t.Fatalf("checkpoint %q", saver.last())
		}
		// Once one message waited the timeout for the topic, later ones do not wait again.
		if n := s.attempts["5"]; n != 2 { // the failed send, then the dead letter
			t.Fatalf("event 5 for the timed-out topic was sent %d times, want 2 (diverted at its first failure)", n)
		}
	})
}

func TestMissingTopicDivertedByDeadLetterEvent(t *testing.T) {
	for _, policy := range []string{PoisonStop, PoisonDeadLetter} {
		t.Run(policy, func(t *testing.T) { testMissingTopicDivertedByDeadLetterEvent(t, policy) })
	}
}

func testMissingTopicDivertedByDeadLetterEvent(t *testing.T, policy string) {
	var missing sync.Map
	missing.Store("typo", true)
	s, saver := &memSink{fail: missingTopics(&missing)}, &memSaver{}
	p := newTestPipeline(t, s, saver, policy)
	p.cfg.MissingTopicWait = time.Hour
	p.cfg.DeadLetterEvents = map[string]bool{"2": true}
	var audit []string
	p.cfg.Audit = func(line string) error { audit = append(audit, line); return nil }
	if err := runAll(t, p, txn(1, "a:1"), txn(2, "a:2@typo"), txn(3, "a:3")); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedIDs(s), "dlq/2 t/1 t/3"; got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if n := s.attempts["2"]; n != 2 { // the failed send, then the dead letter
		t.Fatalf("event 2 sent %d times, want 2", n)
	}
	if len(audit) != 1 || !strings.Contains(audit[0], `event_id "2"`) || !strings.Contains(audit[0], "--dead-letter-event") {
		t.Fatalf("audit %q", audit)
	}
}

func TestMissingDeadLetterTopicStops(t *testing.T) {
	var missing sync.Map
	missing.Store("dlq", true)
	var sent atomic.Int64
	fail := missingTopics(&missing)
	s, saver := &memSink{fail: func(m *sink.Message, n int) error { sent.Add(1); return fail(m, n) }}, &memSaver{}
	p := newTestPipeline(t, s, saver, PoisonDeadLetter)
	p.cfg.MissingTopicWait = 100 * time.Millisecond
	err := runAll(t, p, txn(1, "a:1"), txn(2, "b:2@nowhere"))
	var pe *PoisonError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "dead-letter topic dlq") || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("Run = %v, want a stop naming the missing dead-letter topic", err)
	}
	if sent.Load() < 3 {
		t.Fatalf("the dead letter was tried %d times: it should wait for the topic before stopping", sent.Load())
	}
	if got := saver.last(); got != "0-1-1" {
		t.Fatalf("checkpoint %q, want 0-1-1: up to the row whose dead letter was never stored", got)
	}
}
