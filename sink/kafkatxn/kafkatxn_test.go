package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

const eventsTopic = "events"

// cluster starts a kfake cluster with a 3-partition events topic.
func cluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, eventsTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counters are the session's metric callbacks.
type counters struct{ fenced, committed, aborted atomic.Int64 }

func options(addrs []string, c *counters) Options {
	o := Options{
		Name: "main", Brokers: addrs, Timeout: 3 * time.Second,
		TransactionalID: "outboxd-orders", Topic: "outboxd_checkpoints", Key: "orders",
	}
	if c != nil {
		o.OnFenced = func() { c.fenced.Add(1) }
		o.OnTxn = func(committed bool) {
			if committed {
				c.committed.Add(1)
			} else {
				c.aborted.Add(1)
			}
		}
	}
	return o
}

// open opens a session after creating the checkpoint topic as `check` does.
func open(t *testing.T, o Options) *Session {
	t.Helper()
	ctx := testCtx(t)
	chk, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := chk.Check(ctx, []string{eventsTopic}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	chk.Close()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cp(t *testing.T, seq int) checkpoint.Checkpoint {
	t.Helper()
	return checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: fmt.Sprintf("0-1-%d", seq)}
}

func msgs(key string, from, n int) []*sink.Message {
	out := make([]*sink.Message, n)
	for i := range out {
		out[i] = &sink.Message{Topic: eventsTopic, Key: []byte(key), Value: fmt.Appendf(nil, "%s-%d", key, from+i),
			Headers: []sink.Header{{Key: "event_id", Value: fmt.Appendf(nil, "e-%s-%d", key, from+i)}}}
	}
	return out
}

// readCommitted returns every record of topic a read_committed consumer sees up to each
// partition's last stable offset now, in partition order.
func readCommitted(t *testing.T, addrs []string, topic string, extra ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	lo, err := kadm.NewClient(admCl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(100 * time.Millisecond)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed read of %s: %v (still waiting for %v)", topic, ctx.Err(), want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if w, ok := want[r.Partition]; ok && r.Offset >= w-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func values(rs []*kgo.Record) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		out[string(r.Value)] = true
	}
	return out
}

func load(t *testing.T, s *Session) *checkpoint.Checkpoint {
	t.Helper()
	c, err := s.Load(testCtx(t))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestCommitMakesRecordsAndCheckpointVisibleTogether(t *testing.T) {
	c := cluster(t)
	var n counters
	s := open(t, options(c.ListenAddrs(), &n))
	ctx := testCtx(t)
	if got := load(t, s); got != nil {
		t.Fatalf("Load before any Save = %+v, want nil", got)
	}
	if err := s.Send(ctx, msgs("a", 0, 10)); err != nil {
		t.Fatal(err)
	}
	if rs := readCommitted(t, c.ListenAddrs(), eventsTopic); len(rs) != 0 {
		t.Fatalf("a read_committed consumer sees %d records before the commit", len(rs))
	}
	if got := load(t, s); got != nil {
		t.Fatalf("Load sees the open transaction's checkpoint: %+v", got)
	}
	if err := s.Save(ctx, cp(t, 10)); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if rs := readCommitted(t, c.ListenAddrs(), eventsTopic); len(rs) != 10 {
		t.Fatalf("after the commit a read_committed consumer sees %d records, want 10", len(rs))
	}
	got := load(t, s)
	if got == nil || got.GTIDSet != "0-1-10" || got.SavedAt.IsZero() {
		t.Fatalf("Load after the commit = %+v", got)
	}
	if n.committed.Load() != 1 || n.aborted.Load() != 0 {
		t.Fatalf("OnTxn: %d commits, %d aborts; want 1, 0", n.committed.Load(), n.aborted.Load())
	}
	// The record is the file store's JSON.
	rs := readCommitted(t, c.ListenAddrs(), "outboxd_checkpoints")
	if len(rs) != 1 || string(rs[0].Key) != "orders" {
		t.Fatalf("checkpoint topic holds %v", rs)
	}
	if _, err := decode("x", rs[0].Value); err != nil || rs[0].Value[len(rs[0].Value)-1] != '\n' {
		t.Fatalf("checkpoint record is not the file store's JSON: %q (%v)", rs[0].Value, err)
	}
}

func TestAbortedTransactionNeverShows(t *testing.T) {
	c := cluster(t)
	var n counters
	s := open(t, options(c.ListenAddrs(), &n))
	ctx := testCtx(t)
	if err := s.Send(ctx, msgs("a", 0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, cp(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, msgs("a", 3, 5)); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	// A new transaction after the abort commits normally.
	if err := s.Send(ctx, msgs("b", 0, 2)); err != nil {
		t.Fatal(err)
	}
	if got := load(t, s); got == nil || got.GTIDSet != "0-1-1" {
		t.Fatalf("Load after the abort = %+v, want the committed 0-1-1", got)
	}
	if err := s.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic))
	if len(vs) != 3 || !vs["a-0"] || !vs["a-2"] || vs["a-3"] || vs["b-0"] {
		t.Fatalf("read_committed sees %v, want only a-0..a-2", vs)
	}
	if n.aborted.Load() != 2 {
		t.Fatalf("OnTxn aborts = %d, want 2", n.aborted.Load())
	}
	if err := s.Abort(ctx); err != nil { // none open: a no-op
		t.Fatal(err)
	}
	if n.aborted.Load() != 2 {
		t.Fatal("Abort without an open transaction reached the coordinator")
	}
}

func TestSecondSessionFencesTheFirst(t *testing.T) {
	c := cluster(t)
	var n1, n2 counters
	s1 := open(t, options(c.ListenAddrs(), &n1))
	ctx := testCtx(t)
	if err := s1.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s1.Save(ctx, cp(t, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(ctx, msgs("a", 2, 2)); err != nil { // open when the takeover comes
		t.Fatal(err)
	}
	s2, err := Open(ctx, options(c.ListenAddrs(), &n2))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// The takeover aborted s1's open transaction.
	if got := load(t, s2); got == nil || got.GTIDSet != "0-1-2" {
		t.Fatalf("new holder loads %+v, want 0-1-2", got)
	}
	err = s1.Send(ctx, msgs("a", 4, 1))
	if !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("old holder's Send after the takeover: %v, want ErrFenced", err)
	}
	if err := s1.Save(ctx, cp(t, 5)); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("old holder's Save after the takeover: %v, want ErrFenced", err)
	}
	if n1.fenced.Load() < 1 {
		t.Fatal("OnFenced not called")
	}
	if err := s2.Send(ctx, msgs("b", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s2.Save(ctx, cp(t, 6)); err != nil {
		t.Fatal(err)
	}
	vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic))
	if len(vs) != 3 || vs["a-2"] || vs["a-3"] || vs["a-4"] || !vs["b-0"] {
		t.Fatalf("read_committed sees %v, want a-0, a-1, b-0", vs)
	}
	if n2.fenced.Load() != 0 {
		t.Fatal("the new holder was fenced")
	}
}

func TestCrashBetweenCheckpointProduceAndCommit(t *testing.T) {
	c := cluster(t)
	s1 := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	if err := s1.Save(ctx, cp(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	// Save's first half: the checkpoint record is acknowledged, the commit never sent.
	rec := &kgo.Record{Topic: "outboxd_checkpoints", Key: []byte("orders"), Value: []byte(`{"flavor":"mariadb","gtid_set":"0-1-2","saved_at":"2026-01-01T00:00:00Z"}`), Partition: 0}
	if err := s1.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s2, err := Open(ctx, options(c.ListenAddrs(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := load(t, s2); got == nil || got.GTIDSet != "0-1-1" {
		t.Fatalf("Load after the crash = %+v, want the older 0-1-1", got)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 0 {
		t.Fatalf("read_committed sees the crashed transaction's records: %v", vs)
	}
}

func TestCheckCreatesAndRefuses(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	o := options(c.ListenAddrs(), nil)
	chk, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer chk.Close()
	if err := chk.Check(ctx, []string{eventsTopic}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	td, err := adm.ListTopics(ctx, o.Topic)
	if err != nil || len(td[o.Topic].Partitions) != 1 {
		t.Fatalf("checkpoint topic after Check: %+v, %v", td, err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, o.Topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On(o.Topic, nil)
	for _, cfg := range rc.Configs {
		if cfg.Key == "cleanup.policy" && cfg.MaybeValue() != "compact" {
			t.Fatalf("created with cleanup.policy=%s", cfg.MaybeValue())
		}
	}
	if err := chk.Check(ctx, []string{eventsTopic}); err != nil {
		t.Fatalf("Check of the topic it created: %v", err)
	}
	if err := chk.Check(ctx, []string{"nope"}); err == nil || !contains(err, "topic nope does not exist") {
		t.Fatalf("Check of a missing route topic: %v", err)
	}

	del := "delete"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &del}, "deleting"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "two"); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{"deleting": "cleanup.policy=delete: it needs compact", "two": "has 2 partitions: it needs exactly 1"} {
		o := o
		o.Topic = topic
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Check(ctx, nil)
		s.Close()
		if err == nil || !contains(err, want) {
			t.Fatalf("Check of checkpoint topic %s: %v, want %q", topic, err, want)
		}
	}
}

// TestCheckDoesNotFence: `outboxd check` beside a running outboxd leaves its transaction alone.
func TestCheckDoesNotFence(t *testing.T) {
	c := cluster(t)
	var n counters
	s := open(t, options(c.ListenAddrs(), &n))
	ctx := testCtx(t)
	if err := s.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	chk, err := New(options(c.ListenAddrs(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := chk.Check(ctx, []string{eventsTopic}); err != nil {
		t.Fatal(err)
	}
	if _, err := chk.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := chk.Send(ctx, msgs("x", 0, 1)); err == nil || !contains(err, "not opened") {
		t.Fatalf("Send on a session from New: %v", err)
	}
	chk.Close()
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatalf("Save after a check: %v", err)
	}
	if n.fenced.Load() != 0 {
		t.Fatal("check fenced the running session")
	}
}

func TestLoadOnMissingTopic(t *testing.T) {
	c := cluster(t)
	s, err := New(options(c.ListenAddrs(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Load(testCtx(t)); got != nil || err != nil {
		t.Fatalf("Load of a missing topic = %+v, %v; want nil, nil", got, err)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestFencedSessionAsksNothingMore: after a refusal for fencing, Abort returns it without a
// request, so the deposed holder cannot bump the epoch back (an abort may reload the producer id).
func TestFencedSessionAsksNothingMore(t *testing.T) {
	c := cluster(t)
	var n1 counters
	s1 := open(t, options(c.ListenAddrs(), &n1))
	ctx := testCtx(t)
	if err := s1.Send(ctx, msgs("a", 0, 1)); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, options(c.ListenAddrs(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s1.Send(ctx, msgs("a", 1, 1)); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Send: %v", err)
	}
	var initPID atomic.Int64
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		initPID.Add(1)
		return nil, nil, false
	})
	if err := s1.Abort(ctx); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Abort of a fenced session: %v", err)
	}
	if err := s1.Save(ctx, cp(t, 1)); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Save of a fenced session: %v", err)
	}
	if initPID.Load() != 0 {
		t.Fatalf("the fenced session sent %d InitProducerID", initPID.Load())
	}
	if n1.fenced.Load() != 1 {
		t.Fatalf("OnFenced called %d times for one refusal", n1.fenced.Load())
	}
	if err := s2.Send(ctx, msgs("b", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s2.Save(ctx, cp(t, 2)); err != nil {
		t.Fatalf("the new holder's Save: %v", err)
	}
}

// Load reads from the end of the checkpoint topic: with far more commits than its first
// window, it returns the newest checkpoint, skips an aborted newer one, and still finds a key
// whose only record is thousands of offsets back (the reconcile mark written once).
func TestLoadReadsBackFromTheEnd(t *testing.T) {
	c := cluster(t)
	s := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	if err := s.SaveMark(ctx, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	const commits = 1500 // each: checkpoint record + marker; the mark rides the first
	for i := 1; i <= commits; i++ {
		if err := s.Save(ctx, cp(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	// A newer checkpoint in a transaction that is aborted.
	if err := s.Send(ctx, msgs("a", 0, 1)); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: "outboxd_checkpoints", Key: []byte("orders"), Value: []byte(`{"flavor":"mariadb","gtid_set":"0-1-99999","saved_at":"2026-01-01T00:00:00Z"}`), Partition: 0}
	if err := s.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := open(t, options(c.ListenAddrs(), nil)) // reads only what is committed
	if got := load(t, fresh); got == nil || got.GTIDSet != fmt.Sprintf("0-1-%d", commits) {
		t.Fatalf("Load = %+v, want the newest committed 0-1-%d", got, commits)
	}
	m, ok, err := fresh.LoadMark(ctx)
	if err != nil || !ok || !m.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("LoadMark = %v %v %v, want the mark committed %d commits back", m, ok, err, commits)
	}
}
