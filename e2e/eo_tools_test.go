package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// Issue 24 item 3, "cleanup, reconcile and backfill keep working" under exactly-once.

// backfill with checkpoint.store: kafka and ha: refused while an outboxd holds the leader lock
// (its check used to pass every kafka store); then it sends at least once (plain records, which
// read_committed consumers see) and writes the snapshot's checkpoint to the Kafka store.
func TestBackfillKafkaStore(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, "")
	useKafkaStore(t, kc, &o, "bf")
	o.Extra += "ha: {enabled: true}\n"
	cfgPath := writeCfg(t, o)
	committed := backfillRefusedWhileLeading(t, w, o, cfgPath, "bf", 20)
	want := w.position()
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	code, out = runBinary(t, "checkpoint", "show", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, `"gtid_set": "`+want+`"`) {
		t.Fatalf("checkpoint show after the backfill: exit %d, want gtid_set %s:\n%s", code, want, out)
	}
	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(rs) >= len(committed) })
	if err != nil {
		t.Fatalf("read_committed consumer saw %d of %d backfilled rows: %v", len(recs), len(committed), err)
	}
	if tl := kafkaread.Count(recs, committed); tl.Duplicates != 0 || len(tl.Lost) != 0 || len(tl.Unexpected) != 0 {
		t.Fatalf("read_committed read-back of the backfill: %+v", tl)
	}
}

// Exactly-once with cleanup and reconcile. Rows flow while outboxd is killed (kill -9) and
// restarted twice, so the topic holds aborted records; a transaction aborted on purpose adds
// copies of five delivered events. outboxd reconcile, reading read_committed, then finds every
// row once: nothing missing, no duplicate (a read_uncommitted reader counts the aborted copies).
// The periodic reconcile commits its mark with a checkpoint. Restarted with a short retention,
// cleanup deletes every delivered row, after the commits that cover them.
func TestExactlyOnceCleanupReconcile(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	o.Tables = []string{w.schema + ".outbox_event\n    columns: {created_at: created_at}"}
	useKafkaStore(t, kc, &o, "eoc")
	// The heartbeat moves the committed checkpoint's commit time on once rows stop: the
	// sweep's cutoff follows it.
	w.exec("CREATE TABLE " + w.schema + ".heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)")
	o.Source = "  heartbeat: {table: " + w.schema + ".heartbeat, interval: 1s}\n"
	base := o.Extra
	base += "reconcile: {interval: 1s, window: 2s, delay: 3s, slack: 1m}\n"
	o.Extra = base + "cleanup: {retention: 1h, interval: 1s, commit_margin: 1s, time_zone: SYSTEM}\n"
	cfgPath := writeCfg(t, o)
	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	since := time.Now().Add(-time.Second)
	kw := startKeyedWriter(t, w, 4*time.Millisecond)
	p := startBinary(t, "run", "--config", cfgPath)
	for kill := 1; kill <= 2; kill++ {
		before := len(rd.Records())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(rs) >= before+20 || !p.running() })
		cancel()
		if !p.running() || err != nil {
			t.Fatalf("run %d delivered nothing or exited (%v):\n%s", kill, err, tail(p.output(), 40))
		}
		time.Sleep(time.Duration(kill) * 150 * time.Millisecond)
		p.signal(t, syscall.SIGKILL)
		p.wait(t, 10*time.Second)
		p = startBinary(t, "run", "--config", cfgPath)
	}
	time.Sleep(time.Second)
	committed := kw.halt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(kafkaread.Count(rs, committed).Lost) == 0 })
	if err != nil {
		t.Fatalf("read_committed: %+v: %v\n%s", kafkaread.Count(recs, committed), err, tail(p.output(), 40))
	}
	if tl := kafkaread.Count(recs, committed); tl.Duplicates != 0 || len(tl.Unexpected) != 0 {
		t.Fatalf("read_committed read-back: %+v", tl)
	}

	// Copies of five delivered events in a transaction that aborts, as a crash leaves them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.TransactionalID("aborter"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, id := range committed[:5] {
		rec := &kgo.Record{Topic: "t", Key: []byte("k0"), Value: []byte(id), Headers: []kgo.RecordHeader{
			{Key: "event_id", Value: []byte(id)}, {Key: "outbox_table", Value: []byte(w.schema + ".outbox_event")}}}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	all := readUncommitted(t, kc, "t")
	t.Logf("%d committed rows; the topic holds %d records read_uncommitted (aborted ones included)", len(committed), all)
	if all < len(committed)+5 {
		t.Fatalf("read_uncommitted sees %d records, want at least %d (the aborted copies)", all, len(committed)+5)
	}

	until := time.Now().Add(time.Second)
	code, rep, out := runReconcile(t, cfgPath, since, until)
	if code != 0 || rep.Checked != len(committed) || rep.Found != len(committed) || rep.Missing != 0 || rep.Duplicated != 0 {
		t.Fatalf("reconcile: exit %d, checked %d found %d missing %d duplicated %d of %d rows (%v)\n%s",
			code, rep.Checked, rep.Found, rep.Missing, rep.Duplicated, len(committed), eventIDsOf(rep.DuplicatedEvents), out)
	}

	// The periodic reconcile's mark is committed to the checkpoint topic with a checkpoint.
	mk, err := kafkaread.NewReader(kc.ListenAddrs(), eoCheckpointTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer mk.Close()
	mctx, mcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer mcancel()
	if _, err := mk.PollUntil(mctx, func(rs []kafkaread.Record) bool {
		return slices.ContainsFunc(rs, func(r kafkaread.Record) bool {
			return string(r.Key) == "eoc"+kafkatxn.MarkSuffix && strings.Contains(string(r.Value), "reconciled_through")
		})
	}); err != nil {
		t.Fatalf("no committed reconcile mark record in %s within 30 s: %v\n%s", eoCheckpointTopic, err, tail(p.output(), 40))
	}

	// Cleanup: with a short retention every delivered row goes.
	p.stop(t)
	o.Extra = base + "cleanup: {retention: 1s, interval: 1s, commit_margin: 1s, time_zone: SYSTEM}\n"
	writeCfg(t, o)
	p = startBinary(t, "run", "--config", cfgPath)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := w.db.QueryRow("SELECT COUNT(*) FROM " + w.schema + ".outbox_event").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d delivered rows still in the table after 60 s of cleanup:\n%s", n, tail(p.output(), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
	p.stop(t)
}

// readUncommitted counts the records of topic a read_uncommitted consumer sees up to each
// partition's high watermark: the aborted ones too.
func readUncommitted(t *testing.T, kc *kfake.Cluster, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_uncommitted read of %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				n++
			}
			if w, ok := want[r.Partition]; ok && r.Offset >= w-1 {
				delete(want, r.Partition)
			}
		})
	}
	return n
}
