package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// sweepWorld is two outbox tables under the created_at sweep (retention 1s, so the key path
// deletes nothing): outbox_event with a DATETIME created_at in the SYSTEM zone, and ts_outbox
// with a TIMESTAMP created_at and event_id VARCHAR(400). Rows routed "t" go to topic t; the
// sink refuses messages over 4 KiB, and on_poison dead-letters to dlq.
type sweepWorld struct {
	*world
	o cfgOpts
	c *consumer
	// mu guards all, which the invariant's watcher (proptest_test.go) reads while rows go in.
	mu sync.Mutex
	// all is every committed row's event id; the invariant: each is on the broker at topic t
	// or in a table.
	all map[string]bool
	// mustGo is the rows the randomized tests (randomRows) require to be deleted in the end.
	mustGo map[string]bool
	// phase names the moment of the run for the watcher's failure message.
	phase atomic.Value
}

const tsOutboxDDL = `CREATE TABLE %s.ts_outbox (
  id         BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id   VARCHAR(400) NOT NULL,
  biz_key    VARCHAR(64)  NULL,
  topic      VARCHAR(128) NULL,
  payload    LONGBLOB     NULL,
  created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY (created_at)
)`

func newSweepWorld(t *testing.T, extraCleanup string) *sweepWorld {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	loadBerlin(t, w)
	w.exec(fmt.Sprintf(tsOutboxDDL, w.schema))
	kc := kafkaCluster(t, "t", "dlq")
	o := simpleCfg(t, w, kc, "")
	o.Tables = []string{
		w.schema + ".outbox_event\n    columns: {created_at: created_at}",
		w.schema + ".ts_outbox\n    columns: {created_at: created_at}",
	}
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 4096}", kc.ListenAddrs()[0])}
	o.Routes = "  - match: {topic: t}\n    sink: main\n    topic: t\n"
	o.OnPoison, o.DeadLetter = "dead_letter", "{sink: main, topic: dlq}"
	o.Extra = "cleanup: {retention: 1s, interval: 1s, commit_margin: 1s, batch: 50, max_rows_per_second: 50000, time_zone: SYSTEM" + extraCleanup + "}\n"
	w.exec("CREATE TABLE " + w.schema + ".heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)")
	o.Source = "  heartbeat: {table: " + w.schema + ".heartbeat, interval: 1s}\n"
	o.Start = w.position()
	return &sweepWorld{world: w, o: o, c: newConsumer(t, kc, "t", "dlq"), all: map[string]bool{}, mustGo: map[string]bool{}}
}

// loadBerlin loads Europe/Berlin (a zone with DST changes) into the server's time zone tables,
// once per server.
func loadBerlin(t *testing.T, w *world) {
	t.Helper()
	var n int
	if err := w.db.QueryRow("SELECT COUNT(*) FROM mysql.time_zone_name WHERE Name = 'Europe/Berlin'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return
	}
	cmd := exec.Command("sh", "-c", fmt.Sprintf("mariadb-tzinfo-to-sql /usr/share/zoneinfo/Europe/Berlin Europe/Berlin | mariadb -h 127.0.0.1 -P %d -u root mysql", w.srv.Port))
	if out, err := cmd.CombinedOutput(); err != nil {
		// CI installs tzdata (scripts/install-deps.sh): the DST cases never skip there.
		msg := fmt.Sprintf("cannot load Europe/Berlin into the time zone tables (needs mariadb-tzinfo-to-sql and /usr/share/zoneinfo: apt-get install -y tzdata): %v %s", err, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// ins is one INSERT on its own session: bin false commits it with sql_log_bin=0 (the relay never
// sees it), zone sets the session's time_zone, at its clock (SET TIMESTAMP), createdAt an
// explicit created_at expression.
type ins struct {
	table, id, topic string
	payload          int // bytes
	bin              bool
	zone             string
	at               time.Time
	createdAt        string
}

func (sw *sweepWorld) insert(rows ...ins) {
	t := sw.t
	ctx := context.Background()
	conn, err := sw.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, r := range rows {
		set := []string{"SET SESSION sql_log_bin = 1", "SET time_zone = DEFAULT", "SET TIMESTAMP = DEFAULT"}
		if !r.bin {
			set[0] = "SET SESSION sql_log_bin = 0"
		}
		if r.zone != "" {
			set[1] = "SET time_zone = '" + r.zone + "'"
		}
		if !r.at.IsZero() {
			set[2] = fmt.Sprintf("SET TIMESTAMP = %d.%06d", r.at.Unix(), r.at.Nanosecond()/1000)
		}
		for _, q := range set {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		cols, vals := "event_id, biz_key, topic, payload", "?, ?, ?, REPEAT('p', ?)"
		args := []any{r.id, fmt.Sprintf("k%d", sw.committed()%7), r.topic, max(r.payload, 1)}
		if r.createdAt != "" {
			cols += ", created_at"
			vals += ", " + r.createdAt
		}
		q := fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", sw.schema, r.table, cols, vals)
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		sw.record(r.id)
	}
	for _, q := range []string{"SET SESSION sql_log_bin = 1", "SET time_zone = DEFAULT", "SET TIMESTAMP = DEFAULT"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// record records committed event ids (after their COMMIT returned).
func (sw *sweepWorld) record(ids ...string) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, id := range ids {
		sw.all[id] = true
	}
}

// committed is how many rows were committed so far.
func (sw *sweepWorld) committed() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return len(sw.all)
}

// snapshot is a copy of the committed event ids.
func (sw *sweepWorld) snapshot() map[string]bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return maps.Clone(sw.all)
}

// left is the event ids in both tables.
func (sw *sweepWorld) left() map[string]bool {
	sw.t.Helper()
	out, err := sw.leftErr()
	if err != nil {
		sw.t.Fatal(err)
	}
	return out
}

// leftErr is left for a goroutine other than the test's.
func (sw *sweepWorld) leftErr() (map[string]bool, error) {
	out := map[string]bool{}
	for _, tb := range []string{"outbox_event", "ts_outbox"} {
		ids, err := mariadb.EventIDs(context.Background(), sw.db, sw.schema+"."+tb)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, ids)
	}
	return out, nil
}

// onBroker is the event ids the consumer received so far, by topic (t, where an event is at
// t and also elsewhere).
func (sw *sweepWorld) onBroker(d time.Duration) map[string]string {
	out := map[string]string{}
	for _, r := range sw.c.settle(d) {
		if id := header(r, "event_id"); out[id] != "t" {
			out[id] = r.Topic
		}
	}
	return out
}

// lost is the committed event ids (of all, read before left) neither in left nor at topic t
// of got, the topic every route gives: a dead letter is no delivery, its row must stay.
func lost(all, left map[string]bool, got map[string]string) []string {
	var out []string
	for id := range all {
		if !left[id] && got[id] != "t" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// checkInvariant fails when a committed row is neither on the broker (at topic t) nor in a
// table. The committed rows are read first and the broker last: a row deleted after the
// table was read was proven on the broker before.
func (sw *sweepWorld) checkInvariant(when string) {
	sw.t.Helper()
	all := sw.snapshot()
	left := sw.left()
	if ids := lost(all, left, sw.onBroker(300*time.Millisecond)); len(ids) > 0 {
		sw.t.Fatalf("%s: event %q is neither on the broker nor in the table: lost", when, ids[0])
	}
}

// waitLeft waits until the tables hold exactly want, checking the invariant all along.
func (sw *sweepWorld) waitLeft(r *relay, want map[string]bool, timeout time.Duration) {
	t := sw.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sw.checkInvariant("while sweeping")
		left := sw.left()
		var extra, gone []string
		for id := range left {
			if !want[id] {
				extra = append(extra, id)
			}
		}
		for id := range want {
			if !left[id] {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			sort.Strings(gone)
			t.Fatalf("rows deleted without proof of delivery: %q", gone)
		}
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, l := range strings.Split(r.logText(), "\n") {
				if strings.Contains(l, "cleanup") {
					t.Log(l)
				}
			}
			sort.Strings(extra)
			t.Fatalf("delivered rows still in the tables after %s: %q", timeout, extra)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func long(prefix string, n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }

// The created_at sweep deletes a row only when its event is on the broker at the topic its
// route gives: never a row the relay never saw (sql_log_bin=0), whatever its created_at says
// (a client clock hours behind, a DATETIME written in another zone, a TIMESTAMP in the hour a
// DST change repeats), and never a dead-lettered row (no route, or refused by the broker for
// size), with event ids longer than 255 bytes. The rows around them that were delivered go.
func TestSweepDeletesOnlyWhatTheBrokerHas(t *testing.T) {
	sw := newSweepWorld(t, "")
	r := startRelay(t, sw.o, daemon.Options{})
	keep := map[string]bool{}
	var rows []ins
	for i := range 10 {
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("ok-%d", i), topic: "t", bin: true})
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("nobin-%d", i), topic: "t"})
		keep[fmt.Sprintf("nobin-%d", i)] = true
	}
	for i := range 5 {
		// A client clock three hours behind the server's.
		behind := "NOW(6) - INTERVAL 3 HOUR"
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("behind-ok-%d", i), topic: "t", bin: true, createdAt: behind})
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("behind-nobin-%d", i), topic: "t", createdAt: behind})
		keep[fmt.Sprintf("behind-nobin-%d", i)] = true
		// A DATETIME written by a session eight hours behind cleanup.time_zone (SYSTEM): it
		// looks eight hours old. Only the delivered ones go (found on the broker).
		rows = append(rows, ins{table: "outbox_event", id: fmt.Sprintf("dt-ok-%d", i), topic: "t", bin: true})
		rows = append(rows, ins{table: "outbox_event", id: fmt.Sprintf("dt-west-%d", i), topic: "t", bin: true, zone: "-08:00"})
		rows = append(rows, ins{table: "outbox_event", id: fmt.Sprintf("dt-west-nobin-%d", i), topic: "t", zone: "-08:00"})
		keep[fmt.Sprintf("dt-west-nobin-%d", i)] = true
	}
	// Europe/Berlin's last DST change of 2025: 01:00 UTC on 26 October, 03:00 CEST back to
	// 02:00 CET; the wall-clock hour 02:00-03:00 happens twice. Rows stamped in both.
	for i, at := range []time.Time{time.Date(2025, 10, 26, 0, 30, 0, 0, time.UTC), time.Date(2025, 10, 26, 1, 30, 0, 0, time.UTC)} {
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("dst-ok-%d", i), topic: "t", bin: true, zone: "Europe/Berlin", at: at})
		rows = append(rows, ins{table: "ts_outbox", id: fmt.Sprintf("dst-nobin-%d", i), topic: "t", zone: "Europe/Berlin", at: at})
		keep[fmt.Sprintf("dst-nobin-%d", i)] = true
	}
	// Issue 21 item 2: 300-byte event ids, one routed nowhere, one refused by the broker for
	// its size; both dead-lettered (the second without its payload).
	noRoute, tooLarge := long("noroute-", 300), long("toolarge-", 300)
	rows = append(rows, ins{table: "ts_outbox", id: noRoute, topic: "nowhere", bin: true},
		ins{table: "ts_outbox", id: tooLarge, topic: "t", payload: 1_500_000, bin: true})
	keep[noRoute], keep[tooLarge] = true, true
	sw.insert(rows...)

	got := sw.c.waitFor(10+5*3+2+2, time.Minute) // ok, behind-ok, dt-ok, dt-west, dst-ok, the two dead letters
	topics := map[string]string{}
	for _, rec := range got {
		topics[header(rec, "event_id")] = rec.Topic
	}
	if topics[noRoute] != "dlq" || topics[tooLarge] != "dlq" {
		t.Fatalf("dead letters on %q and %q, want dlq", topics[noRoute], topics[tooLarge])
	}
	sw.waitLeft(r, keep, time.Minute)
	// A few more rounds, a full pass among them: still nothing without proof goes.
	time.Sleep(12 * time.Second)
	sw.waitLeft(r, keep, time.Second)
	logs := r.logText()
	if !strings.Contains(logs, "rows kept without proof of delivery") || !strings.Contains(logs, "nobin-") {
		t.Fatal("no warning naming the rows kept without proof")
	}
}

// A randomized run (seeded, proptestRand) of the created_at sweep alone (retention 1s): the
// mix of randomRows, and a restart of the relay midway with rows committed while it is down.
// The watcher checks the invariant all along: every committed row is on the broker, or in its
// table, or both; in the end every row randomRows says must go is gone.
func TestSweepRandomized(t *testing.T) {
	rnd := proptestRand(t)
	sw := newSweepWorld(t, "")
	r := startRelay(t, sw.o, daemon.Options{})
	stop := sw.watch()
	sw.setPhase("first batch")
	sw.insert(sw.randomRows(rnd, 0, 150)...)
	time.Sleep(3 * time.Second)
	sw.setPhase("restart")
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	sw.setPhase("stopped")
	sw.insert(sw.randomRows(rnd, 150, 150)...) // committed while outboxd is stopped
	sw.setPhase("after the restart")
	r = startRelay(t, sw.o, daemon.Options{})
	sw.waitGone(90*time.Second, r)
	time.Sleep(3 * time.Second)
	stop()
	sw.checkInvariant("at the end")
}
