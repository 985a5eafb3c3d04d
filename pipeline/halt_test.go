package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// countingSink counts Send calls and acknowledges everything, except that while hold is set
// a call waits for ctx (a broker that does not answer).
type countingSink struct {
	calls atomic.Int64
	hold  atomic.Bool
	held  chan struct{} // receives once per held call
}

func (s *countingSink) Send(ctx context.Context, msgs []*sink.Message) error {
	s.calls.Add(1)
	if s.hold.Load() {
		select {
		case s.held <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return sink.AllFailed(len(msgs), ctx.Err())
	}
	return nil
}

func (s *countingSink) Close() error { return nil }

func (m *memSaver) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.saves)
}

func haltPipeline(t *testing.T, s sink.Sink, saver Saver, guard func() error) *Pipeline {
	t.Helper()
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		CheckpointInterval: time.Hour, DrainTimeout: 10 * time.Second, Guard: guard, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A ctx cancelled with a cause wrapping ErrHalt stops the run at once: the batch blocked in
// Send is abandoned, the batches queued behind it are not sent (no drain), and the final save
// does not happen. Run returns the cause.
func TestHaltCauseStopsWithoutDrainOrSave(t *testing.T) {
	s := &countingSink{held: make(chan struct{}, 1)}
	s.hold.Store(true)
	saver := &memSaver{}
	p := haltPipeline(t, s, saver, nil)
	in := make(chan *binlog.Txn, 8)
	for i := 1; i <= 5; i++ {
		in <- txn(i, fmt.Sprintf("k:%d", i)) // one key: one lane, the rest queue behind the first
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	select {
	case <-s.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no send started")
	}
	time.Sleep(20 * time.Millisecond) // the other transactions are queued in the lane
	before := s.calls.Load()
	saves := saver.count()
	s.hold.Store(false) // a drain would now succeed at once
	cancel(fmt.Errorf("%w: lost the lock", ErrHalt))
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return promptly after the halt (a drain would wait for DrainTimeout)")
	}
	if !errors.Is(err, ErrHalt) {
		t.Fatalf("Run returned %v, want the halt cause", err)
	}
	if n := s.calls.Load() - before; n != 0 {
		t.Errorf("%d send attempts after the halt, want 0", n)
	}
	if n := saver.count() - saves; n != 0 {
		t.Errorf("%d saves after the halt, want 0", n)
	}
}

// The same with nothing in flight: the lanes are idle when the halt comes, so the stop path
// reaches the final save at once; it must still not save, on every run.
func TestHaltCauseNeverSavesWhenIdle(t *testing.T) {
	for i := range 200 {
		s := &countingSink{}
		saver := &memSaver{}
		p := haltPipeline(t, s, saver, nil)
		in := make(chan *binlog.Txn)
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx, in) }()
		in <- txn(1, "k:1") // taken in: its send is acknowledged at once
		cancel(fmt.Errorf("%w: lost the lock", ErrHalt))
		if err := <-done; !errors.Is(err, ErrHalt) {
			t.Fatalf("run %d: Run returned %v, want the halt cause", i, err)
		}
		if n := saver.count(); n != 0 {
			t.Fatalf("run %d: %d saves after a halt (%v), want 0", i, n, saver.saves)
		}
	}
}

// A Guard that fails stops the pipeline before the next send: nothing more reaches the sink,
// the queued batches are dropped, nothing is saved, and Run returns an error wrapping both
// ErrHalt and the guard's error.
func TestFailingGuardHaltsBeforeTheNextSend(t *testing.T) {
	fenced := errors.New("fenced")
	var fail atomic.Bool
	guard := func() error {
		if fail.Load() {
			return fenced
		}
		return nil
	}
	s := &countingSink{}
	saver := &memSaver{}
	p := haltPipeline(t, s, saver, guard)
	in := make(chan *binlog.Txn, 8)
	in <- txn(1, "k:1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first transaction was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	fail.Store(true)
	before := s.calls.Load()
	for i := 2; i <= 6; i++ {
		in <- txn(i, fmt.Sprintf("k%d:%d", i, i))
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop on the failing guard")
	}
	if !errors.Is(err, ErrHalt) || !errors.Is(err, fenced) {
		t.Fatalf("Run returned %v, want ErrHalt wrapping the guard's error", err)
	}
	if n := s.calls.Load() - before; n != 0 {
		t.Errorf("%d send attempts after the guard failed, want 0", n)
	}
	if n := saver.count(); n != 0 {
		t.Errorf("%d saves (%v), want none: a halted run never saves", n, saver.saves)
	}
}
