package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/reconcile"
)

// idsReader is a broker holding one copy of every id in have, stamped at any time: it records
// the most event ids one Count was asked about (the rows reconcile held at once).
type idsReader struct {
	have  map[string]bool
	peak  int
	calls int
}

func (r *idsReader) Count(_ context.Context, _ string, _, _ time.Time, counts map[string]int) error {
	r.calls++
	r.peak = max(r.peak, len(counts))
	for id := range counts {
		if r.have[id] {
			counts[id]++
		}
	}
	return nil
}

func (r *idsReader) Close() error { return nil }

// Reconcile reads the tables slice by slice with real MariaDB queries: with SliceRows 500,
// 4,000 rows over ten minutes in two tables plus 800 rows sharing one created_at are all
// checked, no broker read is asked about more than 500 ids (except the 800 of one instant,
// which cannot be split), and the rows without a message are exactly the missing ones.
func TestReconcileSlicesMariaDB(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(fmt.Sprintf(strings.Replace(outboxDDL, "outbox_event", "outbox_two", 1), w.schema))
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rd := &idsReader{have: map[string]bool{}}
	insert := func(table string, ids []string, ats []time.Time) {
		var vals []string
		var args []any
		for i, id := range ids {
			vals = append(vals, "(?, 'k', 'orders', 'p', FROM_UNIXTIME(?))")
			args = append(args, id, fmt.Sprintf("%d.%06d", ats[i].Unix(), ats[i].Nanosecond()/1000))
		}
		w.exec("INSERT INTO "+w.schema+"."+table+" (event_id, biz_key, topic, payload, created_at) VALUES "+strings.Join(vals, ","), args...)
	}
	total, missing := 0, 0
	for _, table := range []string{"outbox_event", "outbox_two"} {
		for chunk := range 4 {
			var ids []string
			var ats []time.Time
			for i := range 500 {
				n := chunk*500 + i
				id := fmt.Sprintf("%s-%d", table, n)
				ids = append(ids, id)
				ats = append(ats, base.Add(time.Duration(n)*300*time.Millisecond))
				if n%199 == 0 {
					missing++
				} else {
					rd.have[id] = true
				}
			}
			insert(table, ids, ats)
			total += len(ids)
		}
	}
	var ids []string
	var ats []time.Time
	instant := base.Add(7*time.Minute + 150*time.Millisecond) // off the other rows' 300 ms grid
	for i := range 800 {
		ids = append(ids, fmt.Sprintf("same-%d", i))
		ats = append(ats, instant)
		rd.have[ids[i]] = true
	}
	insert("outbox_event", ids, ats)
	total += len(ids)

	cfg := &config.Config{
		Tables: []config.Table{
			{Table: w.schema + ".outbox_event", Columns: config.Columns{CreatedAt: "created_at"}},
			{Table: w.schema + ".outbox_two", Columns: config.Columns{CreatedAt: "created_at"}},
		},
		Sinks:  map[string]config.Sink{"main": {Type: config.SinkKafka, Brokers: []string{"127.0.0.1:1"}}},
		Routes: []config.Route{{Sink: "main", Topic: "{topic}"}},
		// The rows' DATETIME created_at is written in the server's zone (FROM_UNIXTIME).
		Cleanup: &config.Cleanup{Enabled: new(false), TimeZone: "SYSTEM"},
	}
	cfg.ApplyDefaults()
	rep, err := reconcile.Run(context.Background(), w.db, cfg, reconcile.Options{
		Window: reconcile.Window{Since: base, Until: base.Add(10 * time.Minute)}, Before: time.Minute, After: time.Minute,
		SliceRows: 500, Readers: map[string]reconcile.Reader{"main": rd}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != total || rep.Missing != missing || rep.Found != total-missing {
		t.Errorf("checked %d found %d missing %d, want %d, %d, %d", rep.Checked, rep.Found, rep.Missing, total, total-missing, missing)
	}
	if rd.peak != 800 {
		t.Errorf("a Count was asked about %d ids at most, want 800 (the one instant; every other slice at most 500)", rd.peak)
	}
	if rd.calls < 4000/500 {
		t.Errorf("%d broker reads for %d rows in slices of 500", rd.calls, total)
	}
}

// The slices against the real Kafka reader and kfake, records produced by a real client with
// the times a relay gives them: 1,200 rows over ten minutes checked in slices of at most 150
// rows with a 30 s slack. Records stamped 30 s before or just under 30 s after their row (so
// in a neighbouring slice's time) are found, a second copy in the next slice's time is one
// duplicate, a row whose only record was produced last in its partition behind records
// stamped minutes later (as a replay after a restart is) is found by the second look, and the
// rows never produced are exactly the missing ones.
func TestReconcileSlicesKafka(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	const n, slack = 1200, 30 * time.Second
	var vals []string
	var args []any
	var recs, replays []*kgo.Record
	missing, dup := map[string]bool{}, map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("k%d", i)
		at := base.Add(time.Duration(i) * 500 * time.Millisecond)
		vals = append(vals, "(?, ?, 'orders', 'p', FROM_UNIXTIME(?))")
		args = append(args, id, fmt.Sprintf("c%d", i%7), fmt.Sprintf("%d.%06d", at.Unix(), at.Nanosecond()/1000))
		rec := func(ts time.Time) *kgo.Record {
			return &kgo.Record{Topic: "orders", Partition: int32(i % 3), Timestamp: ts, Value: []byte(id),
				Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}}
		}
		switch {
		case i%251 == 0:
			missing[id] = true
		case i%211 == 0 && i < n/2:
			replays = append(replays, rec(at))
		case i%2 == 0:
			recs = append(recs, rec(at.Add(-slack)))
		default:
			recs = append(recs, rec(at.Add(slack-time.Millisecond)))
		}
		if i%97 == 1 {
			dup[id] = true
			recs = append(recs, rec(at.Add(slack-time.Millisecond)))
		}
	}
	w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, biz_key, topic, payload, created_at) VALUES "+strings.Join(vals, ","), args...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	if err := cl.ProduceSync(context.Background(), append(recs, replays...)...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := &config.Config{
		Tables: []config.Table{{Table: w.schema + ".outbox_event", Columns: config.Columns{CreatedAt: "created_at"}}},
		Sinks:  map[string]config.Sink{"main": {Type: config.SinkKafka, Brokers: kc.ListenAddrs()}},
		Routes: []config.Route{{Sink: "main", Topic: "{topic}"}},
		// The rows' DATETIME created_at is written in the server's zone (FROM_UNIXTIME).
		Cleanup: &config.Cleanup{Enabled: new(false), TimeZone: "SYSTEM"},
	}
	cfg.ApplyDefaults()
	readers, err := reconcile.OpenReaders(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer readers["main"].Close()
	rep, err := reconcile.Run(context.Background(), w.db, cfg, reconcile.Options{
		Window: reconcile.Window{Since: base, Until: base.Add(10 * time.Minute)}, Before: slack, After: slack,
		SliceRows: 150, Readers: readers})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != n || rep.Missing != len(missing) || rep.Found != n-len(missing) || rep.Duplicated != len(dup) {
		t.Errorf("checked %d found %d missing %d duplicated %d, want %d, %d, %d, %d", rep.Checked, rep.Found, rep.Missing, rep.Duplicated,
			n, n-len(missing), len(missing), len(dup))
	}
	for _, e := range rep.MissingEvents {
		if !missing[e.EventID] {
			t.Errorf("%s reported missing", e.EventID)
		}
	}
	for _, e := range rep.DuplicatedEvents {
		if !dup[e.EventID] || e.Found != 2 {
			t.Errorf("%s reported duplicated with %d copies", e.EventID, e.Found)
		}
	}
}

// Reconcile reads its window in slices by created_at: without an index on it each slice scans
// the table. With reconcile: on, check warns with the ALTER TABLE (exit 0: a warning), and
// outboxd reconcile notes it on stderr; with the index, neither does.
func TestReconcileCreatedAtIndexWarning(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	path := reconcileCfg(t, o, "r.yaml")
	if err := os.WriteFile(path, append(must(os.ReadFile(path)), "reconcile: {interval: 1h}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	table := w.schema + ".outbox_event"
	fix := "ALTER TABLE " + table + " ADD INDEX (created_at)"
	code, out := runBinary(t, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "column "+table+".created_at is the first column of no index") || !strings.Contains(out, fix) {
		t.Fatalf("check without an index on created_at: exit %d, want 0 and a warning naming %q\n%s", code, fix, out)
	}
	since, until := time.Now().Add(-time.Minute).Format(time.RFC3339), time.Now().Format(time.RFC3339)
	code, out = runBinary(t, "reconcile", "--config", path, "--since", since, "--until", until)
	if code != 0 || !strings.Contains(out, "note: "+table+".created_at leads no index") {
		t.Fatalf("reconcile without an index: exit %d\n%s", code, out)
	}
	w.exec(fix)
	code, out = runBinary(t, "check", "--config", path)
	if code != 0 || strings.Contains(out, "no index") {
		t.Fatalf("check with the index: exit %d\n%s", code, out)
	}
	code, out = runBinary(t, "reconcile", "--config", path, "--since", since, "--until", until)
	if code != 0 || strings.Contains(out, "no index") {
		t.Fatalf("reconcile with the index: exit %d\n%s", code, out)
	}
}
