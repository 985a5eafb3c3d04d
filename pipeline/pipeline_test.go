package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// fakeRouter sends every row to sink "main" under its own topic; topic "nowhere" is unroutable.
type fakeRouter struct{}

func (fakeRouter) Route(t *binlog.Txn, ev *binlog.Event) (string, *sink.Message, error) {
	topic := string(ev.Topic.Bytes)
	if topic == "nowhere" {
		return "", nil, fmt.Errorf("no route matches table %s.%s topic %s", ev.Schema, ev.Table, topic)
	}
	return "main", &sink.Message{Topic: topic, Key: ev.Key.Bytes, Value: ev.Payload.Bytes, EventID: string(ev.EventID.Bytes)}, nil
}

func (fakeRouter) DeadLetter(t *binlog.Txn, ev *binlog.Event, code string, reason error) (string, *sink.Message, error) {
	return "main", &sink.Message{Topic: "dlq", Key: ev.Key.Bytes, Value: ev.Payload.Bytes, EventID: string(ev.EventID.Bytes),
		Headers: []sink.Header{{Key: "reason", Value: []byte(reason.Error())}, {Key: "code", Value: []byte(code)}}}, nil
}

// memSink stores acknowledged messages in order. fail decides, per attempt, whether a message
// fails; a failed message fails every later one with the same key in that call, as the
// contract requires.
type memSink struct {
	mu       sync.Mutex
	stored   []*sink.Message
	attempts map[string]int
	fail     func(m *sink.Message, attempt int) error
	block    chan struct{} // when set, Send waits for it to close
}

func (s *memSink) Send(ctx context.Context, msgs []*sink.Message) error {
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return sink.AllFailed(len(msgs), ctx.Err())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts == nil {
		s.attempts = map[string]int{}
	}
	var se sink.SendError
	failedKeys := map[string]error{}
	for i, m := range msgs {
		s.attempts[m.EventID]++
		if err, ok := failedKeys[string(m.Key)]; ok {
			se.Failures = append(se.Failures, sink.Failure{Index: i, Err: err})
			continue
		}
		if s.fail != nil {
			if err := s.fail(m, s.attempts[m.EventID]); err != nil {
				failedKeys[string(m.Key)] = err
				se.Failures = append(se.Failures, sink.Failure{Index: i, Err: err})
				continue
			}
		}
		s.stored = append(s.stored, m)
	}
	if len(se.Failures) > 0 {
		return &se
	}
	return nil
}

func (s *memSink) Close() error { return nil }

func (s *memSink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.stored))
	for i, m := range s.stored {
		out[i] = m.Topic + "/" + m.EventID
	}
	return out
}

func sortedIDs(s *memSink) string {
	ids := s.ids()
	sort.Strings(ids)
	return strings.Join(ids, " ")
}

// keyOrder lists the event ids stored for key, in store order.
func (s *memSink) keyOrder(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.stored {
		if string(m.Key) == key {
			out = append(out, m.EventID)
		}
	}
	return strings.Join(out, " ")
}

type memSaver struct {
	mu    sync.Mutex
	saves []checkpoint.Checkpoint
}

func (m *memSaver) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saves = append(m.saves, c)
	return nil
}

func (m *memSaver) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.saves) == 0 {
		return ""
	}
	return m.saves[len(m.saves)-1].GTIDSet
}

// txn builds MariaDB transaction 0-1-seq holding events "key:id@topic".
func txn(seq int, events ...string) *binlog.Txn {
	t := &binlog.Txn{GTID: fmt.Sprintf("0-1-%d", seq), File: "mysql-bin.000001", Pos: uint32(seq * 100)}
	for _, e := range events {
		key, rest, _ := strings.Cut(e, ":")
		id, topic, _ := strings.Cut(rest, "@")
		if topic == "" {
			topic = "t"
		}
		t.Events = append(t.Events, binlog.Event{Schema: "shop", Table: "outbox_event",
			EventID: binlog.Field{Bytes: []byte(id)}, Key: binlog.Field{Bytes: []byte(key)},
			Topic: binlog.Field{Bytes: []byte(topic)}, Payload: binlog.Field{Bytes: []byte("p" + id)}})
	}
	return t
}

func newTestPipeline(t *testing.T, s sink.Sink, saver Saver, onPoison string) *Pipeline {
	t.Helper()
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), OnPoison: onPoison,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		CheckpointInterval: time.Hour, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runAll(t *testing.T, p *Pipeline, txns ...*binlog.Txn) error {
	t.Helper()
	in := make(chan *binlog.Txn, len(txns))
	for _, x := range txns {
		in <- x
	}
	close(in)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Run(ctx, in)
}

func TestDeliversAllAndCheckpointsAtTheEnd(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	err := runAll(t, p, txn(1, "a:1", "b:2"), txn(2), txn(3, "a:3"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedIDs(s), "t/1 t/2 t/3"; got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if got := s.keyOrder("a"); got != "1 3" {
		t.Fatalf("key a stored in order %q", got)
	}
	if got := saver.last(); got != "0-1-3" {
		t.Fatalf("checkpoint %q, want 0-1-3", got)
	}
}

func TestTransientFailuresAreRetriedInKeyOrder(t *testing.T) {
	// Event 1 fails twice; its same-key follower 3 must not overtake it, while key b's event
	// is stored at once.
	s := &memSink{fail: func(m *sink.Message, attempt int) error {
		if m.EventID == "1" && attempt <= 2 {
			return errors.New("broker busy")
		}
		return nil
	}}
	saver := &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	if err := runAll(t, p, txn(1, "a:1", "b:2", "a:3")); err != nil {
		t.Fatal(err)
	}
	if got, want := s.keyOrder("a"), "1 3"; got != want {
		t.Fatalf("key a stored in order %q, want %q", got, want)
	}
	if got, want := sortedIDs(s), "t/1 t/2 t/3"; got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if s.attempts["1"] != 3 {
		t.Fatalf("event 1 sent %d times, want 3", s.attempts["1"])
	}
	if saver.last() != "0-1-1" {
		t.Fatalf("checkpoint %q", saver.last())
	}
}

func TestCheckpointNeverPassesUnacknowledged(t *testing.T) {
	// Transaction 2's event never gets acknowledged: the pipeline must stall on it, and at
	// shutdown save only transaction 1.
	s := &memSink{fail: func(m *sink.Message, _ int) error {
		if m.EventID == "2" {
			return errors.New("broker down")
		}
		return nil
	}}
	saver := &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	p.cfg.DrainTimeout = 50 * time.Millisecond
	in := make(chan *binlog.Txn, 3)
	in <- txn(1, "a:1")
	in <- txn(2, "b:2")
	in <- txn(3, "c:3")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v: a shutdown whose drain timed out loses nothing and is no error", err)
	}
	// Transactions 1 to 3 may have been gathered into one round; either way nothing after 0
	// or 1 may be checkpointed.
	if got := saver.last(); got != "" && got != "0-1-1" {
		t.Fatalf("checkpoint %q passes the unacknowledged transaction 0-1-2", got)
	}
}

func TestShutdownDrainsTheRoundInFlight(t *testing.T) {
	s := &memSink{block: make(chan struct{})}
	saver := &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	in := make(chan *binlog.Txn, 1)
	in <- txn(1, "a:1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	time.Sleep(50 * time.Millisecond) // the round is now blocked in Send
	cancel()
	time.Sleep(50 * time.Millisecond)
	close(s.block) // the broker acknowledges after the shutdown signal
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if saver.last() != "0-1-1" {
		t.Fatalf("checkpoint %q, want the drained transaction 0-1-1", saver.last())
	}
}

func TestPoisonUnroutable(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		s, saver := &memSink{}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonStop)
		err := runAll(t, p, txn(1, "a:1"), txn(2, "a:2@nowhere"), txn(3, "a:3"))
		var pe *PoisonError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "no route matches") {
			t.Fatalf("Run = %v, want a PoisonError", err)
		}
		for _, id := range s.ids() {
			if id == "t/3" {
				t.Fatal("a later transaction was delivered past the poison row")
			}
		}
		if got := saver.last(); got == "0-1-2" || got == "0-1-3" {
			t.Fatalf("checkpoint %q passes the poison row", got)
		}
	})
	t.Run("dead_letter", func(t *testing.T) {
		s, saver := &memSink{}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonDeadLetter)
		if err := runAll(t, p, txn(1, "a:1"), txn(2, "a:2@nowhere"), txn(3, "a:3")); err != nil {
			t.Fatal(err)
		}
		if got, want := sortedIDs(s), "dlq/2 t/1 t/3"; got != want {
			t.Fatalf("stored %q, want %q", got, want)
		}
		if saver.last() != "0-1-3" {
			t.Fatalf("checkpoint %q", saver.last())
		}
	})
}

func TestPermanentRejection(t *testing.T) {
	reject := func(m *sink.Message, _ int) error {
		if m.EventID == "2" && m.Topic != "dlq" {
			return sink.Permanent(errors.New("message too large"))
		}
		return nil
	}
	t.Run("stop", func(t *testing.T) {
		s, saver := &memSink{fail: reject}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonStop)
		err := runAll(t, p, txn(1, "a:1"), txn(2, "b:2"))
		if err == nil || !strings.Contains(err.Error(), "message too large") {
			t.Fatalf("Run = %v", err)
		}
		if got := saver.last(); got == "0-1-2" {
			t.Fatal("checkpoint passes the rejected row")
		}
	})
	t.Run("dead_letter", func(t *testing.T) {
		s, saver := &memSink{fail: reject}, &memSaver{}
		p := newTestPipeline(t, s, saver, PoisonDeadLetter)
		if err := runAll(t, p, txn(1, "a:1", "b:2")); err != nil {
			t.Fatal(err)
		}
		if got, want := sortedIDs(s), "dlq/2 t/1"; got != want {
			t.Fatalf("stored %q, want %q", got, want)
		}
		if saver.last() != "0-1-1" {
			t.Fatalf("checkpoint %q", saver.last())
		}
	})
}
