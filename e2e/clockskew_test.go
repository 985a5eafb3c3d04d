package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

const day = 24 * time.Hour

// skewWorld is a MariaDB whose clock libfaketime offsets from outboxd's (the test process's:
// Go reads the clock through the vDSO, so only the server can be faked), an outbox table with a
// DATETIME created_at, and outboxd in process with cleanup (retention 0: the key path, with a
// key queue of 2 so most rows are left to the created_at sweep, every second) and the periodic
// reconcile on. logged is every row committed to the binlog, unlogged every row written with
// sql_log_bin=0 (never relayed: what must stay, and be reported missing).
type skewWorld struct {
	*world
	clock    *mariadb.FakeClock
	c        *consumer
	r        *relay
	admin    string
	logged   map[string]bool
	unlogged map[string]bool
	out      string          // reconcile.out: the last run's report with every missing id
	reported map[string]bool // every event id a periodic run reported missing so far
}

func newSkewWorld(t *testing.T, offset time.Duration) *skewWorld {
	t.Helper()
	clock := mariadb.FakeClockT(t, offset)
	srv := mariadb.StartT(t, mariadb.Options{Env: clock.Env()})
	w := newWorld(t, srv)
	// Proof that the skew took effect, so the test cannot pass on a server on this host's clock.
	mariadb.WaitClockT(t, w.db, offset, 5*time.Second, 0)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{w.schema + ".outbox_event\n    columns: {created_at: created_at}"}
	o.Routes = "  - match: {topic: t}\n    sink: main\n    topic: t\n"
	// The heartbeat row moves the checkpoint's commit time (the sweep's bound) on a quiet server.
	w.exec("CREATE TABLE " + w.schema + ".heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)")
	o.Source = "  heartbeat: {table: " + w.schema + ".heartbeat, interval: 1s}\n"
	sw := &skewWorld{world: w, clock: clock, admin: admFreeAddr(t), logged: map[string]bool{}, unlogged: map[string]bool{},
		out: filepath.Join(o.Dir, "reconcile.json"), reported: map[string]bool{}}
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", sw.admin) +
		"cleanup: {retention: 0s, interval: 1s, commit_margin: 1s, time_zone: SYSTEM}\n" +
		fmt.Sprintf("reconcile: {interval: 1s, window: 1h, delay: 3s, slack: 1m, out: %q}\n", sw.out)
	sw.c = newConsumer(t, kc, "t")
	sw.r = startRelay(t, o, daemon.Options{CleanupQueueKeys: 2, ClockEvery: time.Second}) // the clock moves within the test
	admWaitReady(t, sw.admin, 200, 30*time.Second)
	return sw
}

// write commits n logged rows in transactions of up to 5, and k unlogged rows in one INSERT
// (one created_at, so every reconcile window holds all of them or none), ids prefixed.
func (sw *skewWorld) write(prefix string, n, k int) {
	sw.t.Helper()
	for i := 0; i < n; i += 5 {
		var rows []row
		for j := i; j < min(i+5, n); j++ {
			id := fmt.Sprintf("%s-ok-%02d", prefix, j)
			rows = append(rows, row{EventID: id, Key: fmt.Sprintf("k%d", j%3), Topic: "t", Payload: []byte("p")})
			sw.logged[id] = true
		}
		sw.commit(rows...)
	}
	if k == 0 {
		return
	}
	ctx := context.Background()
	conn, err := sw.db.Conn(ctx)
	if err != nil {
		sw.t.Fatal(err)
	}
	defer conn.Close()
	var vals []string
	var args []any
	for j := range k {
		id := fmt.Sprintf("%s-nobin-%02d", prefix, j)
		vals, args = append(vals, "(?, 'k', 't', 'x')"), append(args, id)
		sw.unlogged[id] = true
	}
	for _, q := range []string{"SET SESSION sql_log_bin = 0",
		"INSERT INTO " + sw.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES " + strings.Join(vals, ", "),
		"SET SESSION sql_log_bin = 1"} {
		a := args
		if !strings.HasPrefix(q, "INSERT") {
			a = nil
		}
		if _, err := conn.ExecContext(ctx, q, a...); err != nil {
			sw.t.Fatalf("%s: %v", q, err)
		}
	}
}

// table is the event ids in the outbox table.
func (sw *skewWorld) table() map[string]bool {
	sw.t.Helper()
	return tableIDsT(sw.t, sw.db, sw.schema+".outbox_event")
}

// check fails when a row was deleted without proof: an unlogged row gone, or a logged row
// neither in the table nor on the broker (the table read first, the broker last: a row deleted
// after the read was on the broker before). It also checks the operator's gauges: no age or lag
// is negative, whatever the clocks.
func (sw *skewWorld) check(when string) map[string]bool {
	sw.t.Helper()
	left := sw.table()
	got := map[string]bool{}
	for _, r := range sw.c.settle(200 * time.Millisecond) {
		got[header(r, "event_id")] = true
	}
	for id := range sw.unlogged {
		if !left[id] {
			sw.t.Fatalf("%s: %s, never relayed, was deleted", when, id)
		}
		if got[id] {
			sw.t.Fatalf("%s: %s, written with sql_log_bin=0, is on the broker", when, id)
		}
	}
	for id := range sw.logged {
		if !left[id] && !got[id] {
			sw.t.Fatalf("%s: %s is neither in the table nor on the broker: lost", when, id)
		}
	}
	vals, fams := admScrape(sw.t, sw.admin)
	for _, g := range []string{"outboxd_lag_seconds", "outboxd_oldest_unacked_event_age_seconds", "outboxd_checkpoint_age_seconds", "outboxd_binlog_oldest_age_seconds"} {
		if v, ok := vals[g]; !ok || v < 0 {
			sw.t.Fatalf("%s: %s = %v (present %v), want a value >= 0", when, g, v, ok)
		}
	}
	if f := fams["outboxd_cleanup_oldest_row_age_seconds"]; f != nil {
		for _, m := range f.Metric {
			if v := m.GetGauge().GetValue(); v < 0 {
				sw.t.Fatalf("%s: outboxd_cleanup_oldest_row_age_seconds = %v", when, v)
			}
		}
	}
	for _, h := range []string{"outboxd_commit_to_ack_seconds", "outboxd_read_to_ack_seconds"} {
		if f := fams[h]; f != nil && len(f.Metric) > 0 && f.Metric[0].GetHistogram().GetSampleSum() < 0 {
			sw.t.Fatalf("%s: %s has a negative sum %v", when, h, f.Metric[0].GetHistogram().GetSampleSum())
		}
	}
	return got
}

// settle waits until every logged row is on the broker and the table holds exactly the
// unlogged rows (cleanup deleted the rest), checking all along that nothing was lost.
func (sw *skewWorld) settle(when string, timeout time.Duration) {
	sw.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := sw.check(when)
		left := sw.table()
		var missing, extra []string
		for id := range sw.logged {
			if !got[id] {
				missing = append(missing, id)
			}
			if left[id] {
				extra = append(extra, id)
			}
		}
		if len(missing) == 0 && len(extra) == 0 && len(left) == len(sw.unlogged) {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			sort.Strings(extra)
			for _, l := range sw.logLines("cleanup") {
				sw.t.Log(l)
			}
			sw.t.Fatalf("%s: after %s, %d rows not on the broker (%q) and %d delivered rows still in the table (%q)", when, timeout, len(missing), missing, len(extra), extra)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// reportedMissing is every event id the periodic runs reported missing so far: their log lines
// name at most 20, reconcile.out (replaced by each run) all of them.
func (sw *skewWorld) reportedMissing() map[string]bool {
	sw.t.Helper()
	for _, r := range periodicRuns(sw.r.lw) {
		if ids, ok := r["missing_event_ids"].([]any); ok {
			for _, id := range ids {
				sw.reported[fmt.Sprint(id)] = true
			}
		}
	}
	var rep reconcile.Report
	if b, err := os.ReadFile(sw.out); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			sw.t.Fatalf("reconcile.out: %v", err)
		}
	}
	for _, e := range rep.MissingEvents {
		sw.reported[e.EventID] = true
	}
	return sw.reported
}

// waitReported waits until the periodic runs reported every unlogged row missing, and fails
// if they ever reported another (a delivered row called missing) that tolerate does not accept.
func (sw *skewWorld) waitReported(timeout time.Duration, tolerate func(id string) bool) {
	sw.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rep := sw.reportedMissing()
		all := true
		for id := range sw.unlogged {
			all = all && rep[id]
		}
		for id := range rep {
			if !sw.unlogged[id] && (tolerate == nil || !tolerate(id)) {
				sw.t.Fatalf("the periodic reconcile reported %s missing, which was delivered", id)
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			var want []string
			for id := range sw.unlogged {
				if !rep[id] {
					want = append(want, id)
				}
			}
			sort.Strings(want)
			sw.t.Fatalf("after %s the periodic reconcile has not reported %q missing; runs: %v", timeout, want, periodicRuns(sw.r.lw))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logLines is the relay's JSON log lines whose message contains text.
func (sw *skewWorld) logLines(text string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(sw.r.logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && strings.Contains(fmt.Sprint(m["message"]), text) {
			out = append(out, m)
		}
	}
	return out
}

// skewWarning is the periodic reconcile's warning, opsSkewWarning the position sampler's.
const (
	skewWarning    = "this host's clock and the database's differ"
	opsSkewWarning = "the source database's clock is more than a minute from this host's"
)

// The database's clock two days ahead of outboxd's, and two days behind: every committed row is
// delivered; cleanup (the key path, and the created_at sweep for the keys its queue dropped)
// deletes exactly the delivered rows; the rows written with sql_log_bin=0 stay, and the periodic
// reconcile (on the database's clock) reports exactly them missing. The operator sees no
// negative lag or age, no lag on a relay that is caught up (the gauges correct the database's
// times by its measured offset, outboxd_source_clock_offset_seconds), and the skew warned of
// once by the sampler and once by the periodic reconcile, with its size.
func TestClockSkewDatabaseFarOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration
	}{{"ahead", 2 * day}, {"behind", -2 * day}} {
		t.Run(tc.name, func(t *testing.T) {
			sw := newSkewWorld(t, tc.offset)
			sw.write("a", 30, 4)
			sw.settle("after the first rows", 45*time.Second)
			sw.write("b", 20, 3)
			sw.settle("after the second rows", 45*time.Second)
			sw.waitReported(30*time.Second, nil)
			sw.check("at the end")
			vals, _ := admScrape(t, sw.admin)
			if vals["outboxd_cleanup_keys_dropped_total"] == 0 {
				t.Fatal("the key queue dropped no key: the created_at sweep deleted nothing, the test did not exercise it")
			}
			// The gauges compare the database's commit and binlog times with now on its clock:
			// a caught-up relay shows no lag (it showed two days with the clock behind, and
			// hid up to two days of lag with it ahead), the server started seconds ago.
			for _, g := range []string{"outboxd_lag_seconds", "outboxd_binlog_oldest_age_seconds"} {
				if v := vals[g]; v > 120 {
					t.Fatalf("%s = %v on a relay that is caught up, with a server started less than 2 minutes ago", g, v)
				}
			}
			if v := vals["outboxd_source_clock_offset_seconds"]; (time.Duration(v*float64(time.Second)) - tc.offset).Abs() > 5*time.Second {
				t.Fatalf("outboxd_source_clock_offset_seconds = %v, want about %v", v, tc.offset.Seconds())
			}
			if n := len(sw.logLines(opsSkewWarning)); n != 1 {
				t.Fatalf("%d warnings that the database's clock is off this host's, want 1", n)
			}
			warns := sw.logLines(skewWarning)
			if len(warns) != 1 {
				t.Fatalf("%d skew warnings after %d periodic runs, want 1", len(warns), len(periodicRuns(sw.r.lw)))
			}
			if s, _ := warns[0]["skew_seconds"].(float64); (time.Duration(s*float64(time.Second)) - tc.offset).Abs() > 5*time.Second {
				t.Fatalf("the warning says the skew is %v s, want about %v", s, tc.offset.Seconds())
			}
		})
	}
}

// A jump of the database's clock mid-run, a day forward and then back: created_at and the
// binlog's commit times (the sweep's candidate bound, the records' timestamps) jump with it, and
// a transaction open across the jump forward commits with created_at a day before its commit
// time. Forward: every delivered row is deleted, the unlogged ones stay and are reported
// missing (and the straddling rows may be too: their records are stamped a day after their
// created_at). Back: nothing undelivered is deleted and nothing is lost; the sweep's bound went back,
// so it takes a full pass at once (it used to wait until the clock caught up again, a day) and
// looks at the rows written since. Those rows' records follow, in their partitions, records
// stamped a day later, which a read of a time range ends at (ListOffsets by time), so the sweep
// cannot prove them and keeps them, and the periodic reconcile may call them missing: never a
// loss, and documented (docs/operations/cleanup.md).
func TestClockSkewDatabaseJumps(t *testing.T) {
	sw := newSkewWorld(t, 0)
	sw.write("pre", 20, 3)
	sw.settle("before the jump", 45*time.Second)

	// A transaction open across the jump forward.
	ctx := context.Background()
	tx, err := sw.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("straddle-%d", i)
		if _, err := tx.Exec("INSERT INTO "+sw.schema+".outbox_event (event_id, biz_key, topic, payload) VALUES (?, 'k', 't', 'p')", id); err != nil {
			t.Fatal(err)
		}
		sw.logged[id] = true
	}
	if err := sw.clock.Set(day); err != nil {
		t.Fatal(err)
	}
	mariadb.WaitClockT(t, sw.db, day, 5*time.Second, 10*time.Second)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	sw.write("fwd", 20, 3)
	sw.settle("after the jump forward", 45*time.Second)
	// The transaction open across the jump looks, to the database's clock, open for a day:
	// its records are stamped (commit time) a day after its rows' created_at, beyond
	// reconcile.slack, so a window may call them missing (as any transaction open longer than
	// the slack; docs/operations/reconcile.md). The sweep proved them: they are gone.
	straddle := func(id string) bool { return strings.HasPrefix(id, "straddle-") }
	sw.waitReported(30*time.Second, straddle)

	if err := sw.clock.Set(0); err != nil {
		t.Fatal(err)
	}
	mariadb.WaitClockT(t, sw.db, 0, 5*time.Second, 10*time.Second)
	before := maps.Clone(sw.logged)
	sw.write("back", 20, 3)
	sw.c.waitFor(len(sw.logged), 30*time.Second)
	// The sweep looks at the rows written after the step back (it names one it keeps) within
	// a few rounds, the invariant checked all along.
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(sw.logLines("rows kept without proof"), func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["event_ids"]), "back-")
	}) {
		sw.check("after the jump back")
		if time.Now().After(deadline) {
			t.Fatal("no sweep round looked at the rows written after the database's clock went back")
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(sw.logLines("its bound went back")) == 0 {
		t.Fatal("the sweep did not say its bound went back")
	}
	// Only rows written after the step back may be called missing besides the unlogged ones.
	sw.waitReported(30*time.Second, func(id string) bool { return straddle(id) || !before[id] })
	sw.check("at the end")
	left := sw.table()
	for id := range before {
		if left[id] {
			t.Fatalf("%s, delivered before the step back, is still in the table", id)
		}
	}
	// Each of the two warns of the day forward once, and says once that the clocks agree again.
	for _, l := range []string{skewWarning, opsSkewWarning, "this host's clock and the database's agree again", "the source database's clock and this host's agree again"} {
		if n := len(sw.logLines(l)); n != 1 {
			t.Fatalf("%d log lines %q, want 1", n, l)
		}
	}
}
