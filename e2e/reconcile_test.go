package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// reconcileCfg writes o's config with tables[].columns.created_at set, for outboxd reconcile.
func reconcileCfg(t *testing.T, o cfgOpts, name string) string {
	t.Helper()
	y := o.yaml()
	for _, tb := range o.Tables {
		y = strings.Replace(y, "  - table: "+tb+"\n", "  - table: "+tb+"\n    columns: {created_at: created_at}\n", 1)
	}
	if !strings.Contains(y, "\ncleanup:") {
		// The harness writes created_at (a DATETIME) in the server's own zone.
		y += "cleanup: {enabled: false, time_zone: SYSTEM}\n"
	}
	path := filepath.Join(o.Dir, name)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runReconcile runs the binary's reconcile over [since, until) and returns its exit code and
// the report it wrote with --out.
func runReconcile(t *testing.T, cfgPath string, since, until time.Time) (int, reconcile.Report, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	code, output := runBinary(t, "reconcile", "--config", cfgPath, "--since", since.Format(time.RFC3339Nano),
		"--until", until.Format(time.RFC3339Nano), "--slack", "1m", "--out", out)
	var rep reconcile.Report
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reconcile wrote no report (exit %d): %v\n%s", code, err, output)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	return code, rep, output
}

func eventIDsOf(es []reconcile.Event) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.EventID)
	}
	slices.Sort(ids)
	return ids
}

// Issue 13, item 2: after a clean run reconcile finds every row of the window at its route's
// Kafka topic or RocketMQ queue and exits 0; a copy produced again is counted as a duplicate
// (still exit 0); then with a route changed (so some rows went elsewhere than the config now
// says), messages lost from the RocketMQ broker and records deleted from Kafka it lists exactly
// those event ids and exits 1. A row created before the window is not checked.
func TestReconcileFindsMissingAndDuplicated(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders", "elsewhere")
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"PAY_EVENT"}})
	routes := "  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n" +
		"  - match: {topic: \"lost.*\"}\n    sink: main\n    topic: elsewhere\n" +
		"  - sink: main\n    topic: \"{topic}\"\n"
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": kafkaSink(kc), "rmq": rmqSink(rc)},
		Routes: routes,
	}
	// A row from long before the window, which the relay delivers to "elsewhere" too.
	w.exec("INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload, created_at) VALUES ('old-1', 'k', 'lost.old', 'x', '2020-01-01 00:00:00')")
	since := time.Now().Add(-time.Second)
	r := startRelay(t, o, daemon.Options{})
	var orders, pays, lost []string
	for i := range 12 {
		id := fmt.Sprintf("o%d", i)
		orders = append(orders, id)
		w.commit(row{EventID: id, Key: fmt.Sprintf("c%d", i%3), Topic: "orders", Payload: []byte(id)})
	}
	for i := range 6 {
		id := fmt.Sprintf("p%d", i)
		pays = append(pays, id)
		w.commit(row{EventID: id, Key: fmt.Sprintf("a%d", i%2), Topic: "pay.ok", Payload: []byte(id)})
	}
	for i := range 3 {
		id := fmt.Sprintf("l%d", i)
		lost = append(lost, id)
		w.commit(row{EventID: id, Key: "l", Topic: "lost.x", Payload: []byte(id)})
	}
	cons := newConsumer(t, kc, "orders", "elsewhere")
	cons.waitFor(12+3+1, 30*time.Second)
	waitRMQ(t, rc, "PAY_EVENT", 6, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatalf("relay: %v\n%s", err, r.logs)
	}
	until := time.Now().Add(time.Second)
	total := len(orders) + len(pays) + len(lost)

	cfgA := reconcileCfg(t, o, "a.yaml")
	code, rep, out := runReconcile(t, cfgA, since, until)
	if code != 0 || rep.Checked != total || rep.Found != total || rep.Missing != 0 || rep.Duplicated != 0 {
		t.Fatalf("clean run: exit %d, report %+v\n%s", code, rep, out)
	}

	// A second copy of o3, as a resend after a lost acknowledgement would leave.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, rec := range cons.got {
		if header(rec, "event_id") == "o3" {
			dup := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
			if err := cl.ProduceSync(context.Background(), dup).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, rep, out = runReconcile(t, cfgA, since, until)
	if code != 0 || rep.Missing != 0 || rep.Duplicated != 1 || !slices.Equal(eventIDsOf(rep.DuplicatedEvents), []string{"o3"}) || rep.DuplicatedEvents[0].Found != 2 {
		t.Fatalf("with a duplicate: exit %d, report %+v\n%s", code, rep, out)
	}

	// The config now routes lost.* to {topic} (lost.x, which the relay never wrote), and the
	// broker lost p1 and p4.
	oB := o
	oB.Routes = "  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n  - sink: main\n    topic: \"{topic}\"\n"
	cfgB := reconcileCfg(t, oB, "b.yaml")
	if n := rc.Lose("PAY_EVENT", func(m rocketmq.Message) bool { return m.Keys == "p1" || m.Keys == "p4" }); n != 2 {
		t.Fatalf("lost %d messages, want 2", n)
	}
	// And Kafka deleted the head of o0's partition (DeleteRecords, as retention would): o0 and
	// whatever was before it there, which is nothing, o0 being the first order row.
	var o0 *kgo.Record
	for _, rec := range cons.got {
		if header(rec, "event_id") == "o0" {
			o0 = rec
		}
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: "orders", Partition: o0.Partition, At: o0.Offset + 1})
	res, err := kadm.NewClient(cl).DeleteRecords(context.Background(), del)
	if err == nil {
		err = res.Error()
	}
	if err != nil || o0.Offset != 0 {
		t.Fatalf("delete records up to o0 (offset %d): %v", o0.Offset, err)
	}
	code, rep, out = runReconcile(t, cfgB, since, until)
	want := []string{"l0", "l1", "l2", "o0", "p1", "p4"}
	if code != 1 || rep.Checked != total || rep.Missing != len(want) || rep.Found != total-len(want) ||
		!slices.Equal(eventIDsOf(rep.MissingEvents), want) || rep.Duplicated != 1 {
		t.Fatalf("after the route change and the loss: exit %d, missing %v, report %+v\n%s", code, eventIDsOf(rep.MissingEvents), rep, out)
	}
	for _, e := range rep.MissingEvents {
		wantTopic := map[byte]string{'p': "PAY_EVENT", 'l': "lost.x", 'o': "orders"}[e.EventID[0]]
		if e.Topic != wantTopic || e.Table != w.schema+".outbox_event" {
			t.Errorf("missing %s: at %s/%s of %s, want topic %s", e.EventID, e.Sink, e.Topic, e.Table, wantTopic)
		}
	}
	if !strings.Contains(out, "MISSING    p1") {
		t.Errorf("summary does not list p1:\n%s", out)
	}
}

// A config without tables[].columns.created_at, or flags without a window, is a usage error
// (exit 2) before anything is read.
func TestReconcileUsageErrors(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	plain := writeCfg(t, o)
	code, out := runBinary(t, "reconcile", "--config", plain, "--since", "-1h", "--until", "now")
	if code != 2 || !strings.Contains(out, "tables[0].columns.created_at is not set") {
		t.Fatalf("without created_at: exit %d\n%s", code, out)
	}
	withCol := reconcileCfg(t, o, "c.yaml")
	for _, args := range [][]string{
		{"--since", "-1h"},
		{"--since", "yesterday", "--until", "now"},
		{"--since", "now", "--until", "-1h"},
	} {
		code, out := runBinary(t, append([]string{"reconcile", "--config", withCol}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
	w.exec("ALTER TABLE " + w.schema + ".outbox_event ADD COLUMN made VARCHAR(32)")
	bad := strings.Replace(string(must(os.ReadFile(withCol))), "created_at: created_at", "created_at: made", 1)
	badPath := filepath.Join(o.Dir, "bad.yaml")
	if err := os.WriteFile(badPath, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = runBinary(t, "reconcile", "--config", badPath, "--since", "-1h", "--until", "now")
	if code != 2 || !strings.Contains(out, "is varchar; want DATETIME or TIMESTAMP") {
		t.Fatalf("created_at of the wrong type: exit %d\n%s", code, out)
	}
	// check and run refuse that column with the same line.
	code, out = runBinary(t, "check", "--config", badPath)
	const want = "is varchar(32) (configured as tables[0].columns.created_at): set tables[0].columns.created_at to the table's DATETIME or TIMESTAMP"
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("check with created_at of the wrong type: exit %d\n%s", code, out)
	}
	code, out = runBinary(t, "run", "--config", badPath)
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("run with created_at of the wrong type: exit %d\n%s", code, out)
	}
	// With reconcile: on, check says what it reads and with which privileges.
	on := string(must(os.ReadFile(withCol))) + "reconcile: {interval: 1h}\n"
	onPath := filepath.Join(o.Dir, "on.yaml")
	if err := os.WriteFile(onPath, []byte(on), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = runBinary(t, "check", "--config", onPath)
	if code != 0 || !strings.Contains(out, "OK    reconcile: every 1h0m0s on the leader") || !strings.Contains(out, "RocketMQ SUB on them and on group outboxd-reconcile") {
		t.Fatalf("check with reconcile on: exit %d\n%s", code, out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The periodic mode: with reconcile: {interval: 1s, ...} the leader checks the window behind
// now at each interval, outboxd_reconcile_missing_events reads 0 once everything is delivered,
// and after the broker lost two messages it reads 2 and reconcile.out names exactly them.
func TestReconcilePeriodicGaugeAndReport(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"PAY_EVENT"}})
	admin := admFreeAddr(t)
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": kafkaSink(kc), "rmq": rmqSink(rc)},
		Routes: "  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n  - sink: main\n    topic: \"{topic}\"\n",
	}
	out := filepath.Join(o.Dir, "reconcile.json")
	o.Extra = fmt.Sprintf("admin: {listen: %q}\nreconcile: {interval: 1s, window: 1h, delay: 1ms, slack: 1m, out: %q}\n", admin, out)
	cfg, err := config.Parse(must(os.ReadFile(reconcileCfg(t, o, "periodic.yaml"))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, daemon.Options{Logger: zerolog.Nop()}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	admWaitReady(t, admin, 200, 30*time.Second)
	for i := range 8 {
		w.commit(row{EventID: fmt.Sprintf("o%d", i), Key: "k", Topic: "orders", Payload: []byte("x")})
		w.commit(row{EventID: fmt.Sprintf("p%d", i), Key: fmt.Sprintf("a%d", i), Topic: "pay.ok", Payload: []byte("x")})
	}
	waitRMQ(t, rc, "PAY_EVENT", 8, 30*time.Second)
	var vals map[string]float64
	var fams map[string]*dto.MetricFamily
	okRuns := func() float64 {
		v, _ := series(fams, "outboxd_reconcile_runs_total", map[string]string{"result": "ok"})
		return v
	}
	var report reconcile.Report
	readReport := func() {
		report = reconcile.Report{}
		if b, err := os.ReadFile(out); err == nil {
			_ = json.Unmarshal(b, &report)
		}
	}
	admWaitFor(t, 30*time.Second, func() string { return fmt.Sprintf("metrics %v, report %+v", vals, report) }, func() bool {
		vals, fams = admScrape(t, admin)
		readReport()
		return okRuns() > 0 && vals["outboxd_reconcile_missing_events"] == 0 && report.Checked == 16 && report.Found == 16
	})
	if n := rc.Lose("PAY_EVENT", func(m rocketmq.Message) bool { return m.Keys == "p2" || m.Keys == "p5" }); n != 2 {
		t.Fatalf("lost %d", n)
	}
	admWaitFor(t, 30*time.Second, func() string { return fmt.Sprintf("metrics %v, report %+v", vals, report) }, func() bool {
		vals, fams = admScrape(t, admin)
		readReport()
		return vals["outboxd_reconcile_missing_events"] == 2 && report.Missing == 2
	})
	if got := eventIDsOf(report.MissingEvents); !slices.Equal(got, []string{"p2", "p5"}) {
		t.Fatalf("missing %v, want [p2 p5]", got)
	}
	if v, _ := series(fams, "outboxd_reconcile_runs_total", map[string]string{"result": "missing"}); v < 1 {
		t.Fatalf("runs_total{result=missing} = %v", v)
	}
	if v, _ := series(fams, "outboxd_reconcile_runs_total", map[string]string{"result": "failed"}); v != 0 {
		t.Fatalf("runs_total{result=failed} = %v", v)
	}
}
