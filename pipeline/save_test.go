package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/sink"
)

// flakySaver fails while failing is set, and records what it saved.
type flakySaver struct {
	memSaver
	failing  atomic.Bool
	attempts atomic.Int64
	// taken, when set, is sampled into atSecond at the second attempt: the first failure
	// shut the gate before the retry, so reading is paused by then.
	taken    *atomic.Int64
	atSecond atomic.Int64
	// err is what a failing save returns (errDiskGone when nil).
	err error
}

var errDiskGone = errors.New("disk gone")

func (f *flakySaver) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	if f.attempts.Add(1) == 2 && f.taken != nil {
		f.atSecond.Store(f.taken.Load())
	}
	if f.failing.Load() {
		if f.err != nil {
			return f.err
		}
		return errDiskGone
	}
	return f.memSaver.Save(ctx, c)
}

func saveTestPipeline(t *testing.T, saver Saver, start string, limit time.Duration, m *metrics.Metrics) *Pipeline {
	t.Helper()
	set, err := gtid.Parse(gtid.MariaDB, start)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": &memSink{}}, Saver: saver,
		Start: set, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		CheckpointInterval: 10 * time.Millisecond, SaveFailureLimit: limit,
		Logger: zerolog.Nop(), Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A stop with nothing acknowledged still writes the start position: it is what the next
// start must resume from.
func TestStopSavesTheStartWhenNothingMoved(t *testing.T) {
	saver := &memSaver{}
	p := saveTestPipeline(t, saver, "0-1-8", time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx, make(chan *binlog.Txn)); err != nil {
		t.Fatal(err)
	}
	if got := saver.last(); got != "0-1-8" {
		t.Fatalf("checkpoint %q after a stop with nothing acknowledged, want the start 0-1-8", got)
	}
}

// feeder sends txns 1..n into an unbuffered channel and counts how many were taken.
func feeder(ctx context.Context, n int) (<-chan *binlog.Txn, *atomic.Int64) {
	in := make(chan *binlog.Txn)
	var taken atomic.Int64
	go func() {
		for i := 1; i <= n; i++ {
			select {
			case in <- txn(i, "k:"+string(rune('a'+i%26))):
				taken.Add(1)
			case <-ctx.Done():
				return
			}
		}
		<-ctx.Done()
	}()
	return in, &taken
}

// Failing saves are counted and retried with reading paused; after the limit Run stops with
// ErrCheckpointSave, without having saved anything it could not.
func TestFailingSavesPauseReadingAndStopAfterTheLimit(t *testing.T) {
	saver := &flakySaver{}
	saver.failing.Store(true)
	m := metrics.New(metrics.Options{})
	p := saveTestPipeline(t, saver, "0-1-0", 300*time.Millisecond, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, taken := feeder(ctx, 1_000_000)
	saver.taken = taken
	began := time.Now()
	err := p.Run(ctx, in)
	if !errors.Is(err, ErrCheckpointSave) || !errors.Is(err, errDiskGone) {
		t.Fatalf("Run = %v, want ErrCheckpointSave wrapping the saver's error", err)
	}
	if d := time.Since(began); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Run stopped after %s, want just after the 300ms limit", d)
	}
	if n := saver.attempts.Load(); n < 3 {
		t.Fatalf("%d save attempts, want retries", n)
	}
	if saver.last() != "" {
		t.Fatalf("saved %q through a failing saver", saver.last())
	}
	// Reading paused at the first failure: from the retry on, at most the transaction the
	// dispatcher holds at the shut gate (and one the feeder counted) came in. (Sampled at the
	// first attempt instead, the count raced the gate: the dispatcher runs on while the failed
	// save returns, tens of transactions on a busy machine, all of them held at the gate.)
	if second, n := saver.atSecond.Load(), taken.Load(); n > second+2 {
		t.Fatalf("%d transactions taken at the second (retried) save, %d at the end: reading was not paused", second, n)
	}
	if got := counter(t, m, "outboxd_checkpoint_save_failures_total"); got != float64(saver.attempts.Load()) {
		t.Fatalf("save failures metric %v, want %d (every attempt)", got, saver.attempts.Load())
	}
	if got := counter(t, m, "outboxd_checkpoint_saves_total"); got != 0 {
		t.Fatalf("saves metric %v, want 0", got)
	}
}

// The error Run stops with after the limit tells the fix of the store that failed: a store
// that is not a file (the mysql store's lock wait) is not told to make a directory writable.
func TestSaveLimitErrorTellsTheStoresOwnFix(t *testing.T) {
	const fix = "end the transaction that holds a lock on the checkpoint row"
	for _, tc := range []struct {
		name, want, notWant string
		err                 error
	}{
		{"store fix", fix, "directory", checkpoint.WithFix(errors.New("lock wait timeout"), fix)},
		{"no fix", "fix what the error says", "directory", errors.New("refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saver := &flakySaver{err: tc.err}
			saver.failing.Store(true)
			p := saveTestPipeline(t, saver, "0-1-0", 50*time.Millisecond, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			in, _ := feeder(ctx, 10)
			err := p.Run(ctx, in)
			if !errors.Is(err, ErrCheckpointSave) || !errors.Is(err, tc.err) {
				t.Fatalf("Run = %v, want ErrCheckpointSave wrapping the saver's error", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want+" and start it again") || strings.Contains(msg, tc.notWant) {
				t.Fatalf("Run = %q, want the store's fix %q and no %q", msg, tc.want, tc.notWant)
			}
		})
	}
}

// Saves that recover within the limit resume reading, and the run goes on to save everything.
func TestSavesThatRecoverResumeReading(t *testing.T) {
	saver := &flakySaver{}
	saver.failing.Store(true)
	p := saveTestPipeline(t, saver, "0-1-0", time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, taken := feeder(ctx, 200)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, in) }()
	deadline := time.Now().Add(5 * time.Second)
	for saver.attempts.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no retries of the failing save")
		}
		time.Sleep(5 * time.Millisecond)
	}
	paused := taken.Load()
	time.Sleep(100 * time.Millisecond)
	if now := taken.Load(); now > paused+1 {
		t.Fatalf("reading went on while saves failed: %d then %d transactions taken", paused, now)
	}
	saver.failing.Store(false)
	for taken.Load() < 200 || saver.last() != "0-1-200" {
		if time.Now().After(deadline) {
			t.Fatalf("after recovery: %d taken, checkpoint %q", taken.Load(), saver.last())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v after saves recovered", err)
	}
}

// The final save is attempted even when nothing moved, and its failure is the run's error.
func TestFinalSaveFailureIsTheRunsError(t *testing.T) {
	saver := &flakySaver{}
	saver.failing.Store(true)
	p := saveTestPipeline(t, saver, "0-1-3", time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Run(ctx, make(chan *binlog.Txn))
	if !errors.Is(err, ErrCheckpointSave) {
		t.Fatalf("Run = %v, want ErrCheckpointSave", err)
	}
}

func TestSaveGate(t *testing.T) {
	g := newSaveGate()
	if !g.wait(context.Background()) {
		t.Fatal("a new gate is shut")
	}
	g.set(false)
	g.set(false) // idempotent
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if g.wait(ctx) {
		t.Fatal("a shut gate let the dispatcher through")
	}
	var wg sync.WaitGroup
	passed := make(chan bool, 1)
	wg.Go(func() { passed <- g.wait(context.Background()) })
	time.Sleep(10 * time.Millisecond)
	g.set(true)
	g.set(true)
	wg.Wait()
	if !<-passed {
		t.Fatal("reopening the gate did not release a waiter")
	}
}

func counter(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}
