package e2e

// outboxd's MySQL flavor end to end against Dolt, an independent MySQL-compatible server that
// acts as a MySQL-flavor binlog primary (MySQL itself cannot be installed here), with Kafka via
// kfake and a real client reading back. Dolt deviates from MySQL in ways these tests assert as
// expectations rather than paper over (README "What is tested"):
//   - it ignores the replica's GTID set and streams its whole binlog at every (re)connect:
//     go-mysql sends COM_BINLOG_DUMP_GTID with flags 0, and Dolt reads the set only with
//     BINLOG_THROUGH_GTID (0x04). outboxd must therefore filter on the client: a transaction in
//     the set it resumed from is never delivered again (TestDoltRestart, TestDoltReplay);
//   - it sends a heartbeat every 30 s whatever the replica asks, so source.read_timeout must
//     exceed 30 s (45 s here; the default 10 s drops the idle stream);
//   - it writes its own start time into every event header, and GTID events in the 5.6 layout
//     (no commit timestamps): every transaction's commit time, and so the Kafka timestamp, is
//     the server's start, and the lag counts from it;
//   - it prints JSON numbers as doubles and sorts object keys alphabetically;
//   - it refuses SHOW GRANTS without SELECT ON mysql.*;
//   - @@gtid_executed names a transaction a moment before the binlog holds it, so a dump that
//     starts during a commit gets a false "purged" ERROR 1236. The tests avoid that window: they
//     commit only while no outboxd is connecting (before a start, or after /readyz says the
//     stream is up, which it says only after the server accepted the dump and sent an event).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/testenv/dolt"
)

var (
	doltMu     sync.Mutex
	doltShared *dolt.Server
)

// sharedDolt is one Dolt for the package (it starts in well under a second, but its binlog is
// shared: each test works in its own database and reads only its own tables).
func sharedDolt(t *testing.T) *dolt.Server {
	t.Helper()
	dolt.RequireT(t)
	doltMu.Lock()
	defer doltMu.Unlock()
	if doltShared == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := dolt.Start(ctx, dolt.Options{})
		if err != nil {
			t.Fatalf("start Dolt: %v", err)
		}
		doltShared = s
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dolt %s log tail:\n%s", doltShared.Addr, doltShared.LogTail(3000))
		}
	})
	return doltShared
}

func closeSharedDolt() {
	doltMu.Lock()
	defer doltMu.Unlock()
	if doltShared != nil {
		doltShared.Close()
		doltShared = nil
	}
}

// doltWorld is one test's database on the shared Dolt, with the outbox table of the MariaDB
// tests, an orders table and a relay user holding the grants outboxd needs.
type doltWorld struct {
	*world
	srv        *dolt.Server
	user, pass string
}

func newDoltWorld(t *testing.T) *doltWorld {
	t.Helper()
	srv := sharedDolt(t)
	db, err := srv.DB(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	n := schemaN.Add(1)
	w := &doltWorld{world: &world{t: t, db: db, schema: fmt.Sprintf("dshop%d", n)}, srv: srv,
		user: fmt.Sprintf("relay%d", n), pass: "relay-pw"}
	w.exec("CREATE DATABASE " + w.schema)
	w.exec(fmt.Sprintf(outboxDDL, w.schema))
	w.exec("CREATE TABLE " + w.schema + ".orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(64), note TEXT)")
	if err := dolt.GrantRelay(t.Context(), db, w.user, w.pass, w.schema+".outbox_event"); err != nil {
		t.Fatal(err)
	}
	return w
}

// position is the server's executed GTID set, "uuid:1-N".
func (w *doltWorld) position() string {
	w.t.Helper()
	var pos string
	if err := w.db.QueryRow("SELECT @@global.gtid_executed").Scan(&pos); err != nil {
		w.t.Fatal(err)
	}
	return pos
}

// commit inserts an order row and rows into table in one transaction and returns the executed
// set through it: the tests are the server's only writers, so that is the set the checkpoint
// holds once the transaction is acknowledged. Dolt binlogs a transaction inside COMMIT, so it is
// in the binlog when commit returns.
func (w *doltWorld) commit(table string, rows ...row) string {
	w.t.Helper()
	tx, err := w.db.Begin()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := insertRows(tx, w.schema, table, rows); err != nil {
		_ = tx.Rollback()
		w.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		w.t.Fatal(err)
	}
	return w.position()
}

// lastSeq is N of "uuid:1-N": the sequence number of the newest transaction.
func lastSeq(t *testing.T, set string) string {
	t.Helper()
	i := strings.LastIndexAny(set, ":-")
	if i < 0 {
		t.Fatalf("bad GTID set %q", set)
	}
	return set[i+1:]
}

// doltRelay is one outboxd config against the shared Dolt.
type doltRelay struct {
	Start       string
	ReadTimeout string // "" means 45s; "default" leaves it out
	Admin       string // "" means off
	User, Pass  string // "" means the world's relay user
	Tables      []string
	Kafka       *kfake.Cluster
	Dir         string
}

func (w *doltWorld) writeCfg(t *testing.T, o doltRelay) string {
	t.Helper()
	if o.User == "" {
		o.User, o.Pass = w.user, w.pass
	}
	if len(o.Tables) == 0 {
		o.Tables = []string{w.schema + ".outbox_event"}
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "source:\n  flavor: mysql\n  addr: %s\n  user: %s\n  password: %q\n  server_id: %d\n  start: %q\n",
		w.srv.Addr, o.User, o.Pass, 2000+serverIDs.Add(1), o.Start)
	switch o.ReadTimeout {
	case "":
		b.WriteString("  read_timeout: 45s\n")
	case "default":
	default:
		fmt.Fprintf(&b, "  read_timeout: %s\n", o.ReadTimeout)
	}
	b.WriteString("tables:\n")
	for _, tb := range o.Tables {
		fmt.Fprintf(&b, "  - table: %s\n", tb)
	}
	fmt.Fprintf(&b, "sinks:\n  main: %s\nroutes:\n  - sink: main\n    topic: \"{topic}\"\n", kafkaSink(o.Kafka))
	admin := "off"
	if o.Admin != "" {
		admin = o.Admin
	}
	fmt.Fprintf(&b, "admin: {listen: %q}\nretry: {initial: 20ms, max: 200ms}\ncheckpoint: {path: %q, interval: 100ms}\nlog: {level: debug, format: json}\n",
		admin, o.Dir+"/checkpoint.json")
	path := o.Dir + "/outboxd.yaml"
	admWriteFile(t, path, b.String())
	return path
}

// runDolt starts outboxd and, when it has an admin address, waits until /readyz says the binlog
// stream is up, so a commit that follows cannot race the dump's start (see the file comment).
func runDolt(t *testing.T, cfgPath, admin string, args ...string) *proc {
	t.Helper()
	p := startBinary(t, append([]string{"run", "--config", cfgPath}, args...)...)
	if admin != "" {
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := admGet(admin, "/readyz")
			if code == http.StatusOK {
				break
			}
			select {
			case <-p.done:
				t.Fatalf("outboxd exited before it was ready (/readyz %d %s):\n%s", code, body, p.output())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz %d %s after 20s:\n%s", code, body, p.output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return p
}

// stopDolt sends SIGTERM and wants exit 0.
func stopDolt(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("outboxd exited %d after SIGTERM:\n%s", code, p.output())
	}
}

// `check` against Dolt: OK with the documented grants, and Dolt's SHOW GRANTS deviation.
func TestDoltCheck(t *testing.T) {
	w := newDoltWorld(t)
	kc := kafkaCluster(t, "t")
	cfg := w.writeCfg(t, doltRelay{Start: "latest", Kafka: kc})
	code, out := runBinary(t, "check", "--config", cfg)
	t.Logf("outboxd check against Dolt:\n%s", out)
	if code != 0 || !strings.Contains(out, "OK    source and sinks are ready") || strings.Contains(out, "WARN") {
		t.Fatalf("check exited %d, want 0 with OK and no warning:\n%s", code, out)
	}

	// Without SELECT ON mysql.*, Dolt refuses the user's own SHOW GRANTS, which MySQL allows to
	// everyone: check cannot read the privileges and says so.
	w.exec("CREATE USER 'nomysql" + w.schema + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'nomysql" + w.schema + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'nomysql" + w.schema + "'@'%'")
	cfg = w.writeCfg(t, doltRelay{Start: "latest", Kafka: kc, User: "nomysql" + w.schema, Pass: "pw"})
	code, out = runBinary(t, "check", "--config", cfg)
	t.Logf("outboxd check, user without SELECT ON mysql.*:\n%s", out)
	if code == 0 || !strings.Contains(out, "SHOW GRANTS") || !strings.Contains(out, "command denied") {
		t.Fatalf("check exited %d, want an error naming SHOW GRANTS and Dolt's denial:\n%s", code, out)
	}

	// A real problem is still found: the table does not exist.
	cfg = w.writeCfg(t, doltRelay{Start: "latest", Kafka: kc, Tables: []string{w.schema + ".nope"}})
	w.exec("GRANT SELECT ON " + w.schema + ".* TO '" + w.user + "'@'%'")
	code, out = runBinary(t, "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, "table "+w.schema+".nope is missing") {
		t.Fatalf("check exited %d, want 1 naming the missing table:\n%s", code, out)
	}
}

// `run` with flavor mysql: mapping, per-key order, UTF-8 and binary payloads, JSON, an idle
// stream past Dolt's 30 s heartbeat, and frozen event timestamps.
func TestDoltRun(t *testing.T) {
	w := newDoltWorld(t)
	w.exec(strings.Replace(strings.Replace(fmt.Sprintf(outboxDDL, w.schema), "outbox_event", "outbox_json", 1),
		"payload    LONGBLOB", "payload    JSON", 1))
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_json TO '" + w.user + "'@'%'")
	kc := kafkaCluster(t, "orders", "users", "json")
	admin := admFreeAddr(t)
	dir := t.TempDir()
	cfg := w.writeCfg(t, doltRelay{Start: w.position(), Admin: admin, Kafka: kc, Dir: dir,
		Tables: []string{w.schema + ".outbox_event", w.schema + ".outbox_json"}})
	p := runDolt(t, cfg, admin)

	// A second outboxd with the default read_timeout (10s) over the same idle stream: Dolt's 30 s
	// heartbeat comes too late for it.
	kc10 := kafkaCluster(t, "orders", "users", "json")
	admin10 := admFreeAddr(t)
	p10 := runDolt(t, w.writeCfg(t, doltRelay{Start: w.position(), ReadTimeout: "default", Admin: admin10, Kafka: kc10}), admin10)

	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	utf8 := "héllo wörld — 你好, мир 🎉"
	var committed []string
	gtids := map[string]string{} // event id -> GTID "uuid:N"
	var last string
	for i := 0; i < 8; i++ {
		a := row{EventID: fmt.Sprintf("a%d", i), Key: fmt.Sprintf("k%d", i%3), Topic: "orders", EventType: str("created"),
			Payload: fmt.Appendf(nil, `{"order":%d}`, i)}
		b := row{EventID: fmt.Sprintf("b%d", i), Key: "ключ-🔑", Topic: "users", Payload: []byte(utf8)}
		if i == 5 {
			b.Payload = binary
			b.NullKey = true
		}
		last = w.commit("outbox_event", a, b)
		committed = append(committed, a.EventID, b.EventID)
		gtids[a.EventID], gtids[b.EventID] = last, last
	}
	jsonPayload := `{"zz": 1, "b": [1, 2.5, -3, 100000000000000000000, "x", null, true], "aa": {"n": 0}}`
	last = w.commit("outbox_json", row{EventID: "j1", Key: "j", Topic: "json", Payload: []byte(jsonPayload),
		Headers: str(`{"trace": "t-1", "n": 7}`)})
	gtids["j1"] = last

	c := newConsumer(t, kc, "orders", "users", "json")
	rs := c.waitFor(17, 20*time.Second)
	rs = c.settle(300 * time.Millisecond)
	if len(rs) != 17 {
		t.Fatalf("got %d records, want 17: %v", len(rs), eventIDs(rs))
	}
	checkPerKeyOrder(t, rs, append(committed, "j1"))
	uuid := last[:strings.IndexByte(last, ':')]
	var frozen time.Time
	for _, r := range rs {
		id := header(r, "event_id")
		if got, want := header(r, "outbox_gtid"), uuid+":"+lastSeq(t, gtids[id]); got != want {
			t.Errorf("%s: outbox_gtid %q, want %q", id, got, want)
		}
		// Dolt stamps every event with its start time: the Kafka timestamp is that, for all.
		if frozen.IsZero() {
			frozen = r.Timestamp
		}
		if !r.Timestamp.Equal(frozen) {
			t.Errorf("%s: timestamp %s, want the same as the others (%s)", id, r.Timestamp, frozen)
		}
		switch {
		case id == "j1":
			if r.Topic != "json" || string(r.Key) != "j" || header(r, "outbox_table") != w.schema+".outbox_json" {
				t.Errorf("j1: topic %s key %q table %q", r.Topic, r.Key, header(r, "outbox_table"))
			}
		case id[0] == 'a':
			want := fmt.Sprintf(`{"order":%s}`, id[1:])
			if r.Topic != "orders" || string(r.Key) != "k"+fmt.Sprint(int(id[1]-'0')%3) || string(r.Value) != want ||
				header(r, "event_type") != "created" || header(r, "outbox_table") != w.schema+".outbox_event" {
				t.Errorf("%s: topic %s key %q value %q event_type %q table %q", id, r.Topic, r.Key, r.Value, header(r, "event_type"), header(r, "outbox_table"))
			}
		case id == "b5":
			if r.Key != nil || string(r.Value) != string(binary) {
				t.Errorf("b5: key %q (want none), value %x (want bytes 0..255)", r.Key, r.Value)
			}
		default:
			if string(r.Key) != "ключ-🔑" || string(r.Value) != utf8 {
				t.Errorf("%s: key %q value %q, want UTF-8 intact", id, r.Key, r.Value)
			}
		}
	}
	// Dolt takes its start time once its server is up, which on a loaded machine (the whole
	// suite in parallel) can be seconds after the process started; a row committed 36 s later
	// still carrying it (below) is what shows the timestamps are frozen.
	if d := frozen.Sub(w.srv.StartedAt); d < -time.Second || d > 10*time.Second {
		t.Errorf("Kafka timestamp %s, want Dolt's start %s (its event headers carry the start time)", frozen, w.srv.StartedAt)
	}

	// JSON: Dolt's binary JSON has every number as a double and the keys in alphabetical order.
	// MySQL would send {"b": [1, 2.5, -3, 100000000000000000000, "x", null, true], "aa": {"n": 0}, "zz": 1}
	// (keys by length, then bytes; integers as integers).
	for _, r := range rs {
		if header(r, "event_id") != "j1" {
			continue
		}
		const want = `{"aa": {"n": 0.0}, "b": [1.0, 2.5, -3.0, 100000000000000000000.0, "x", null, true], "zz": 1.0}`
		if string(r.Value) != want {
			t.Errorf("JSON payload from Dolt:\n got %s\nwant %s", r.Value, want)
		}
		if got := header(r, "trace"); got != "t-1" {
			t.Errorf("header trace = %q, want t-1", got)
		}
		if got := header(r, "n"); got != "7.0" {
			t.Errorf("header n = %q, want Dolt's double 7.0", got)
		}
		var v any
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Errorf("JSON payload is not JSON: %v", err)
		}
	}
	waitCheckpoint(t, dir, last, 10*time.Second)

	// Idle past Dolt's 30 s heartbeat: with read_timeout 45s the stream stays up, heartbeats
	// arrive; with the default 10s it is dropped and reconnected.
	// /status is sampled meanwhile: a heartbeat shows outboxd caught up (lag 0) for 3 s (3 of
	// the 1 s periods it asked for); after that, until the next one 30 s later, the lag counts
	// from the heartbeat, so an idle Dolt source reads up to 30 s of lag.
	before, _ := admScrape(t, admin)
	var caughtUp int
	var maxIdleLag float64
	for end := time.Now().Add(35 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		st := doltStatus(t, admin)
		if st.CaughtUp {
			caughtUp++
		} else if caughtUp > 0 {
			maxIdleLag = max(maxIdleLag, st.LagSeconds)
		}
	}
	after, _ := admScrape(t, admin)
	t.Logf("idle 35 s: %d samples caught up, then lag up to %.1fs", caughtUp, maxIdleLag)
	if caughtUp == 0 {
		t.Errorf("idle 35 s: /status never showed caught_up, though Dolt sent a heartbeat")
	}
	if after["outboxd_heartbeats_received_total"] <= before["outboxd_heartbeats_received_total"] {
		t.Errorf("no heartbeat from Dolt within 35 s (received %v before, %v after)", before["outboxd_heartbeats_received_total"], after["outboxd_heartbeats_received_total"])
	}
	if out := p.output(); strings.Contains(out, "source connection lost") {
		t.Errorf("read_timeout 45s: the idle stream was dropped:\n%s", out)
	}
	if code, body := admGet(admin, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the idle wait: %d %s", code, body)
	}
	if out := p10.output(); !strings.Contains(out, "no data or heartbeat within 10s") {
		t.Errorf("read_timeout 10s against Dolt: want the idle stream dropped after 10s, got:\n%s", out)
	}

	// Commit after 35 s: the timestamp is still the server's start, so right after the read the
	// lag is the server's uptime, until a heartbeat shows outboxd caught up.
	hb := after["outboxd_heartbeats_received_total"]
	last = w.commit("outbox_event", row{EventID: "late", Key: "k0", Topic: "orders", Payload: []byte("x")})
	rs = c.waitForEvent("late", 10*time.Second)
	st := doltStatus(t, admin)
	// The frozen commit time is when Dolt's binlog producer started, which under load is
	// seconds after the harness started the process: measure the uptime from it.
	uptime := time.Since(frozen).Seconds()
	now, _ := admScrape(t, admin)
	if now["outboxd_heartbeats_received_total"] == hb && (st.CaughtUp || st.LagSeconds < uptime-3) {
		t.Errorf("lag right after reading a transaction: %.1fs (caught_up %v), want the time since Dolt's frozen commit time, %.1fs", st.LagSeconds, st.CaughtUp, uptime)
	}
	t.Logf("lag after reading a transaction committed %.0fs after Dolt started: %.1fs (caught_up %v)", uptime, st.LagSeconds, st.CaughtUp)
	for _, r := range rs {
		if header(r, "event_id") == "late" && !r.Timestamp.Equal(frozen) {
			t.Errorf("late: timestamp %s, want the frozen %s", r.Timestamp, frozen)
		}
	}
	waitCheckpoint(t, dir, last, 10*time.Second)
	cp, err := checkpoint.Read(dir + "/checkpoint.json")
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if !cp.CommitTime.Equal(frozen) {
		t.Errorf("checkpoint commit_time %s, want the frozen %s", cp.CommitTime, frozen)
	}
	stopDolt(t, p)
}

// newDoltRelay is a world with an outboxd config from its current position to topic "t" of a
// new Kafka cluster, with an admin address and a consumer of "t".
func newDoltRelay(t *testing.T) (w *doltWorld, cfg, admin, dir string, c *consumer) {
	w = newDoltWorld(t)
	kc := kafkaCluster(t, "t")
	admin, dir = admFreeAddr(t), t.TempDir()
	cfg = w.writeCfg(t, doltRelay{Start: w.position(), Admin: admin, Kafka: kc, Dir: dir})
	return w, cfg, admin, dir, newConsumer(t, kc, "t")
}

type doltLag struct {
	LagSeconds float64 `json:"lag_seconds"`
	CaughtUp   bool    `json:"caught_up"`
}

// doltStatus reads the lag fields of /status.
func doltStatus(t *testing.T, admin string) doltLag {
	t.Helper()
	var st doltLag
	code, body := admGet(admin, "/status")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/status: %d %s", code, body)
	}
	return st
}

// Restarts: after SIGTERM and after kill -9, no transaction the checkpoint covers is delivered
// again, though Dolt streams them all again; what was committed while outboxd was down arrives.
func TestDoltRestart(t *testing.T) {
	w, cfg, admin, dir, c := newDoltRelay(t)
	var committed []string
	batch := func(name string, n int) (ids []string, pos string) {
		for i := 0; i < n; i++ {
			a := row{EventID: fmt.Sprintf("%s%d.x", name, i), Key: "x", Topic: "t", Payload: []byte(name)}
			b := row{EventID: fmt.Sprintf("%s%d.y", name, i), Key: "y", Topic: "t", Payload: []byte(name)}
			pos = w.commit("outbox_event", a, b)
			ids = append(ids, a.EventID, b.EventID)
		}
		committed = append(committed, ids...)
		return ids, pos
	}
	// delivered again: the records since from whose event is in covered.
	again := func(from int, covered []string) []string {
		in := map[string]bool{}
		for _, id := range covered {
			in[id] = true
		}
		var out []string
		for _, r := range c.got[from:] {
			if id := header(r, "event_id"); in[id] {
				out = append(out, id)
			}
		}
		return out
	}

	p := runDolt(t, cfg, admin)
	a, posA := batch("a", 4)
	c.waitFor(len(a), 20*time.Second)
	waitCheckpoint(t, dir, posA, 10*time.Second)
	stopDolt(t, p)
	if got := readCheckpoint(t, dir); got != posA {
		t.Fatalf("checkpoint after SIGTERM %q, want %q", got, posA)
	}

	// Down: B is committed; then run again.
	b, posB := batch("b", 3)
	from := len(c.got)
	p = runDolt(t, cfg, admin)
	c.waitForEvent(b[len(b)-1], 20*time.Second)
	c.settle(time.Second) // Dolt resends its whole binlog at once: give A time to show up
	if dup := again(from, a); len(dup) > 0 {
		t.Errorf("after SIGTERM and restart, %d events the checkpoint %s covers were delivered again (Dolt streams its whole binlog; the client-side GTID filter must drop them): %v",
			len(dup), posA, dup)
	}
	waitCheckpoint(t, dir, posB, 10*time.Second)

	// kill -9 once the checkpoint covers B, commit C, run again.
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	cIDs, posC := batch("c", 3)
	from = len(c.got)
	p = runDolt(t, cfg, admin)
	c.waitForEvent(cIDs[len(cIDs)-1], 20*time.Second)
	c.settle(time.Second)
	if dup := again(from, append(append([]string{}, a...), b...)); len(dup) > 0 {
		t.Errorf("after kill -9 and restart, %d events the checkpoint %s covers were delivered again: %v", len(dup), posB, dup)
	}
	checkPerKeyOrder(t, c.got, committed)
	waitCheckpoint(t, dir, posC, 10*time.Second)
	stopDolt(t, p)
}

// `checkpoint set --gtid X` and `run --from-gtid X` resend by design, exactly the transactions
// after X, from Dolt as from MySQL.
func TestDoltReplay(t *testing.T) {
	w, cfg, admin, dir, c := newDoltRelay(t)

	p := runDolt(t, cfg, admin)
	var pos []string
	for i := 0; i < 6; i++ {
		pos = append(pos, w.commit("outbox_event",
			row{EventID: fmt.Sprintf("a%d", i), Key: "k", Topic: "t", Payload: []byte("x")},
			row{EventID: fmt.Sprintf("b%d", i), Key: "j", Topic: "t", Payload: []byte("y")}))
	}
	c.waitFor(12, 20*time.Second)
	waitCheckpoint(t, dir, pos[5], 10*time.Second)
	stopDolt(t, p)

	replayed := func(from int) string {
		c.settle(time.Second)
		return fmt.Sprint(sortedByCommit(c.got[from:]))
	}
	code, out := runBinary(t, "checkpoint", "set", "--config", cfg, "--gtid", pos[2])
	if code != 0 {
		t.Fatalf("checkpoint set exited %d:\n%s", code, out)
	}
	from := len(c.got)
	p = runDolt(t, cfg, admin)
	c.waitFor(from+6, 20*time.Second)
	if got, want := replayed(from), "[a3 b3 a4 b4 a5 b5]"; got != want {
		t.Errorf("after checkpoint set %s: got %s, want %s", pos[2], got, want)
	}
	stopDolt(t, p)

	from = len(c.got)
	p = runDolt(t, cfg, admin, "--from-gtid", pos[0])
	c.waitFor(from+10, 20*time.Second)
	if got, want := replayed(from), "[a1 b1 a2 b2 a3 b3 a4 b4 a5 b5]"; got != want {
		t.Errorf("run --from-gtid %s: got %s, want %s", pos[0], got, want)
	}
	waitCheckpoint(t, dir, pos[5], 10*time.Second)
	stopDolt(t, p)
}
