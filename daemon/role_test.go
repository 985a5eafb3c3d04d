package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/sink"
)

// fakeStorage counts the saves that reach it; saveErr, when set, is what they return.
type fakeStorage struct {
	mu      sync.Mutex
	saves   int
	saveErr error
}

func (f *fakeStorage) Load(context.Context) (*checkpoint.Checkpoint, error) { return nil, nil }
func (f *fakeStorage) Close() error                                         { return nil }
func (f *fakeStorage) Save(context.Context, checkpoint.Checkpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saves++
	return f.saveErr
}

func (f *fakeStorage) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.saves
}

func mariaCP(set string) checkpoint.Checkpoint {
	return checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: set, SavedAt: time.Now().UTC()}
}

// Once the guard (the leader's term) fails, savedStore refuses every save without touching
// the store, keeps reporting the last checkpoint that reached it, and does not end the session
// as a store failure would.
func TestSavedStoreRefusesOnceTheGuardFails(t *testing.T) {
	fs := &fakeStorage{}
	s := newSavedStore(t.Context(), fs, nil)
	var fenced atomic.Bool
	s.setGuard(func() error {
		if fenced.Load() {
			return fmt.Errorf("%w: lease passed", election.ErrFenced)
		}
		return nil
	})
	sctx, end := s.fault.session(context.Background())
	if err := s.Save(t.Context(), mariaCP("0-1-1")); err != nil {
		t.Fatal(err)
	}
	fenced.Store(true)
	for range 3 {
		err := s.Save(t.Context(), mariaCP("0-1-2"))
		if !errors.Is(err, election.ErrFenced) {
			t.Fatalf("save after the guard failed: %v, want an error wrapping the guard's", err)
		}
	}
	if n := fs.count(); n != 1 {
		t.Errorf("%d saves reached the store, want only the one before the fence", n)
	}
	if st := s.state(); st.Last.GTIDSet != "0-1-1" {
		t.Errorf("reports %q as saved, want 0-1-1", st.Last.GTIDSet)
	}
	if sctx.Err() != nil {
		t.Error("a refused save ended the session as a store failure")
	}
	if err := end(); err != nil {
		t.Errorf("end = %v", err)
	}
	s.setGuard(nil) // the next term's guard replaces it
	if err := s.Save(t.Context(), mariaCP("0-1-3")); err != nil || fs.count() != 2 {
		t.Errorf("save without a guard: %v (%d saves)", err, fs.count())
	}
}

// haltOnFence turns a term's loss into a halt of the pipeline, and leaves a shutdown a drain.
func TestHaltOnFence(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	ctx, stop := haltOnFence(parent)
	defer stop()
	cancel(fmt.Errorf("%w: lock connection dropped", election.ErrFenced))
	<-ctx.Done()
	if c := context.Cause(ctx); !errors.Is(c, pipeline.ErrHalt) || !errors.Is(c, election.ErrFenced) {
		t.Fatalf("cause after a fence: %v, want ErrHalt and ErrFenced", c)
	}
	parent, cancel = context.WithCancelCause(context.Background())
	ctx, stop = haltOnFence(parent)
	defer stop()
	cancel(nil)
	<-ctx.Done()
	if c := context.Cause(ctx); errors.Is(c, pipeline.ErrHalt) || !errors.Is(c, context.Canceled) {
		t.Fatalf("cause after a shutdown: %v, want context.Canceled and no halt", c)
	}
}

// oneRouter sends every row to sink "main", topic "t".
type oneRouter struct{}

func (oneRouter) Route(_ *binlog.Txn, ev *binlog.Event) (string, *sink.Message, error) {
	return "main", &sink.Message{Topic: "t", Key: ev.Key.Bytes, Value: ev.Payload.Bytes, EventID: string(ev.EventID.Bytes)}, nil
}

func (oneRouter) DeadLetter(_ *binlog.Txn, ev *binlog.Event, _ string, _ error) (string, *sink.Message, error) {
	return "main", &sink.Message{Topic: "dlq", Key: ev.Key.Bytes, EventID: string(ev.EventID.Bytes)}, nil
}

// slowSink acknowledges each Send after delay, whatever its ctx (a broker answering a request
// already written), and counts the calls.
type slowSink struct {
	delay time.Duration
	calls atomic.Int64
}

func (s *slowSink) Send(context.Context, []*sink.Message) error {
	s.calls.Add(1)
	time.Sleep(s.delay)
	return nil
}

func (s *slowSink) Close() error { return nil }

// A save refused because another holder claimed the row (ErrSuperseded) is proof that a newer
// process relays this checkpoint: the session stops at once, as after a fence, rather than
// draining the batches queued in the lanes into the broker beside the new holder.
func TestSupersededSaveHaltsTheSession(t *testing.T) {
	fs := &fakeStorage{saveErr: fmt.Errorf("row held by another: %w", checkpoint.ErrSuperseded)}
	saver := newSavedStore(t.Context(), fs, nil)
	s := &slowSink{delay: 30 * time.Millisecond}
	pl, err := pipeline.New(pipeline.Config{
		Router: oneRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), RetryInitial: time.Millisecond, RetryMax: time.Millisecond,
		CheckpointInterval: 10 * time.Millisecond, DrainTimeout: 10 * time.Second, MaxBatchEvents: 1, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *binlog.Txn, 16)
	for i := 1; i <= 10; i++ { // one key: the lane sends them one batch after another
		tx := &binlog.Txn{GTID: fmt.Sprintf("0-1-%d", i)}
		tx.Events = []binlog.Event{{Schema: "s", Table: "outbox", EventID: binlog.Field{Bytes: fmt.Appendf(nil, "e%d", i)},
			Key: binlog.Field{Bytes: []byte("k")}, Payload: binlog.Field{Bytes: []byte("p")}}}
		in <- tx
	}
	sctx, end := saver.fault.session(context.Background())
	var atStop atomic.Int64
	atStop.Store(-1)
	context.AfterFunc(sctx, func() { atStop.Store(s.calls.Load()) })
	runErr := pl.Run(sctx, in)
	serr := end()
	stopped := atStop.Load()
	if stopped < 0 {
		t.Fatalf("the session was not ended by the superseded save (Run: %v)", runErr)
	}
	if !errors.Is(serr, checkpoint.ErrSuperseded) {
		t.Errorf("the session's end = %v, want the superseded error", serr)
	}
	// The send in flight when the session ended may complete; nothing after it may start.
	if n := s.calls.Load() - stopped; n > 0 {
		t.Errorf("%d sends started after the superseded save ended the session (%d before), want 0", n, stopped)
	}
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// outboxd_leader follows the role; outboxd_leader_epoch is the current or last term's epoch,
// as its help and the README say: a standby after a term keeps showing the epoch it led with.
func TestRoleMetrics(t *testing.T) {
	m := metrics.New(metrics.Options{LockName: "outboxd.x"})
	var h roleHolder
	h.set(roleState{Role: election.RoleStandby}, m)
	if gauge(t, m, "outboxd_leader") != 0 || gauge(t, m, "outboxd_leader_epoch") != 0 {
		t.Fatal("a standby that never led")
	}
	h.set(roleState{Role: election.RoleLeader, Epoch: 3}, m)
	if gauge(t, m, "outboxd_leader") != 1 || gauge(t, m, "outboxd_leader_epoch") != 3 {
		t.Fatal("leader at epoch 3")
	}
	h.set(roleState{Role: election.RoleFenced, Epoch: 3}, m)
	h.set(roleState{Role: election.RoleStandby}, m)
	if l, e := gauge(t, m, "outboxd_leader"), gauge(t, m, "outboxd_leader_epoch"); l != 0 || e != 3 {
		t.Fatalf("standby after leading epoch 3: leader %v, epoch %v; want 0 and 3", l, e)
	}
	h.set(roleState{Role: election.RoleLeader, Epoch: 5}, m)
	if gauge(t, m, "outboxd_leader_epoch") != 5 {
		t.Fatal("leader at epoch 5")
	}
}

// --from-gtid with ha is refused before anything connects: a standby would apply it at its
// first term, moving the shared checkpoint back; checkpoint set is the way.
func TestFromGTIDRefusedWithHA(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {flavor: mariadb, addr: 127.0.0.1:1, user: u, server_id: 9}
tables: [{table: s.outbox_event}]
sinks: {main: {type: kafka, brokers: ["127.0.0.1:1"]}}
routes: [{sink: main}]
checkpoint: {store: mysql, name: orders}
ha: {enabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = Run(t.Context(), cfg, Options{FromGTID: "0-1-5", Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "--from-gtid is refused with ha.enabled") || !strings.Contains(err.Error(), "checkpoint set --gtid 0-1-5 --ignore-leader") {
		t.Fatalf("Run = %v", err)
	}
}
