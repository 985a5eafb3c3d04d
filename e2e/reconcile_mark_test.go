package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/replication"
)

// insertUnlogged inserts outbox rows that never reach the binlog (sql_log_bin=0), so no relay
// delivers them: rows reconcile must report missing. zone, when set, is the session's
// time_zone, in which DEFAULT CURRENT_TIMESTAMP writes a DATETIME created_at; nullAt inserts a
// NULL created_at instead.
func (w *world) insertUnlogged(zone string, nullAt bool, ids ...string) {
	w.t.Helper()
	ctx := context.Background()
	conn, err := w.db.Conn(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close()
	stmts := []string{"SET SESSION sql_log_bin = 0"}
	if zone != "" {
		stmts = append(stmts, "SET SESSION time_zone = '"+zone+"'")
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			w.t.Fatal(err)
		}
	}
	created := ""
	if nullAt {
		created = ", NULL"
	}
	for _, id := range ids {
		q := "INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload" + map[bool]string{true: ", created_at", false: ""}[nullAt] +
			") VALUES (?, 'k', 'orders', 'x'" + created + ")"
		if _, err := conn.ExecContext(ctx, q, id); err != nil {
			w.t.Fatal(err)
		}
	}
	// The pool must not hand this session's settings to the next user.
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_log_bin = 1, time_zone = DEFAULT"); err != nil {
		w.t.Fatal(err)
	}
}

func idsN(prefix string, n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("%s%02d", prefix, i))
	}
	return ids
}

// reconcileDaemon runs the daemon in process with cfgPath's config, logging JSON to the
// returned writer; stop ends it and reports its error.
func reconcileDaemon(t *testing.T, cfgPath string, now func() time.Time) (*lockedWriter, func()) {
	t.Helper()
	cfg, err := config.Parse(must(os.ReadFile(cfgPath)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedWriter{w: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, daemon.Options{Logger: zerolog.New(logs), Now: now}) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}
	t.Cleanup(stop)
	return logs, stop
}

// periodicRuns is the "periodic reconcile" log lines written so far.
func periodicRuns(l *lockedWriter) []map[string]any {
	l.mu.Lock()
	text := l.w.String()
	l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "periodic reconcile" {
			out = append(out, m)
		}
	}
	return out
}

// waitMissing waits until a periodic run logged exactly want as its missing event ids.
func waitMissing(t *testing.T, l *lockedWriter, want []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		runs := periodicRuns(l)
		for _, r := range runs {
			var got []string
			if ids, ok := r["missing_event_ids"].([]any); ok {
				for _, id := range ids {
					got = append(got, fmt.Sprint(id))
				}
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no periodic reconcile run reported %v missing in %s; runs: %v", want, timeout, runs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Issue 21, item 4: a DATETIME created_at written by sessions whose time_zone is not the
// server's (DEFAULT CURRENT_TIMESTAMP writes the session's zone) is read in cleanup.time_zone:
// reconcile --since -30m --until now finds the 40 undelivered rows, where it checked 0 and
// exited 0 reading them in the server's zone. Without the zone it refuses (exit 2) with the fix.
func TestReconcileDatetimeTimeZone(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	var serverZone string
	if err := w.db.QueryRow("SELECT @@global.time_zone").Scan(&serverZone); err != nil {
		t.Fatal(err)
	}
	zone := "-08:00" // eight hours from the server's zone, which the harness leaves at its default
	if serverZone != "SYSTEM" && serverZone != "+00:00" {
		t.Skipf("the server's time_zone is %s; the test writes in %s against a UTC server", serverZone, zone)
	}
	o.Extra = fmt.Sprintf("cleanup: {enabled: false, time_zone: %q}\n", zone)
	path := reconcileCfg(t, o, "tz.yaml")
	ids := idsN("tz", 40)
	w.insertUnlogged(zone, false, ids...)
	now := time.Now()
	code, rep, out := runReconcile(t, path, now.Add(-30*time.Minute), now.Add(time.Second))
	if code != 1 || rep.Checked != 40 || rep.Missing != 40 || !slices.Equal(eventIDsOf(rep.MissingEvents), ids) {
		t.Fatalf("exit %d, checked %d, missing %d (%v); want exit 1 and the 40 rows missing\n%s", code, rep.Checked, rep.Missing, eventIDsOf(rep.MissingEvents), out)
	}

	noZone := strings.Replace(string(must(os.ReadFile(path))), "cleanup: {enabled: false, time_zone: \""+zone+"\"}\n", "", 1)
	noZonePath := filepath.Join(o.Dir, "nozone.yaml")
	if err := os.WriteFile(noZonePath, []byte(noZone), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = runBinary(t, "reconcile", "--config", noZonePath, "--since", "-30m", "--until", "now")
	if code != 2 || !strings.Contains(out, "is a DATETIME") || !strings.Contains(out, "cleanup.time_zone") {
		t.Fatalf("reconcile without a zone: exit %d, want 2 naming cleanup.time_zone\n%s", code, out)
	}
}

// Rows with a NULL created_at are in no window: reconcile counts them and does not call the
// run OK (it exited 0 having checked nothing).
func TestReconcileNullCreatedAt(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec("ALTER TABLE " + w.schema + ".outbox_event MODIFY created_at DATETIME(6) NULL DEFAULT CURRENT_TIMESTAMP(6)")
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	path := reconcileCfg(t, o, "null.yaml")
	w.insertUnlogged("", true, idsN("null", 3)...)
	now := time.Now()
	code, rep, out := runReconcile(t, path, now.Add(-time.Hour), now.Add(time.Second))
	if code != 1 || rep.NullCreatedAt != 3 || rep.OK() || !strings.Contains(out, "NULL created_at") {
		t.Fatalf("exit %d, null_created_at %d; want exit 1 and 3 rows named\n%s", code, rep.NullCreatedAt, out)
	}
}

// The periodic windows follow the durable mark: rows created while outboxd was stopped (never
// delivered) are reported by the first runs after the restart. The windows used to follow the
// process's start, so those rows fell between two processes' windows.
func TestReconcilePeriodicAcrossRestart(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = "reconcile: {interval: 1s, window: 1s, delay: 1s, slack: 1m}\n"
	path := reconcileCfg(t, o, "restart.yaml")
	logs, stop := reconcileDaemon(t, path, nil)
	waitMissing(t, logs, nil, 30*time.Second) // a first run, nothing missing
	stop()

	ids := idsN("down", 5)
	w.insertUnlogged("", false, ids...)
	time.Sleep(3 * time.Second) // outboxd stays down longer than window + delay
	logs, _ = reconcileDaemon(t, path, nil)
	waitMissing(t, logs, ids, 30*time.Second)
}

// With outboxd's clock two hours ahead of the database's, the periodic windows still reach the
// rows just written: they follow the database's NOW(), not the process's clock, which carried
// them past every row not yet written.
func TestReconcilePeriodicClockAhead(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = "reconcile: {interval: 1s, window: 1h, delay: 2s, slack: 1m}\n"
	path := reconcileCfg(t, o, "skew.yaml")
	logs, _ := reconcileDaemon(t, path, func() time.Time { return time.Now().Add(2 * time.Hour) })
	ids := idsN("skew", 5)
	w.insertUnlogged("", false, ids...)
	waitMissing(t, logs, ids, 30*time.Second)
}

// A run is complete only when the window counted again holds the rows it checked, told apart by
// a digest of their event ids that the server computes too (CRC32): it must agree with
// reconcile's own over every column type an event id may have, or every window would look
// changed and the periodic mark would never move.
func TestReconcileDigestMatchesTheServer(t *testing.T) {
	for _, tc := range []struct{ name, column string }{
		{"utf8mb4", "VARCHAR(64) CHARACTER SET utf8mb4 NOT NULL"},
		{"latin1", "VARCHAR(64) CHARACTER SET latin1 NOT NULL"},
		{"varbinary", "VARBINARY(64) NOT NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			w.exec("ALTER TABLE " + w.schema + ".outbox_event MODIFY event_id " + tc.column)
			kc := kafkaCluster(t, "orders")
			path := reconcileCfg(t, simpleCfg(t, w, kc, w.position()), "digest.yaml")
			ids := []string{"plain-1", "café-2", "Ærø-3"}
			if tc.name == "varbinary" {
				ids = append(ids, "\xff\xfe-4") // not UTF-8
			}
			w.insertUnlogged("", false, ids...)
			now := time.Now()
			code, rep, out := runReconcile(t, path, now.Add(-time.Hour), now.Add(time.Minute))
			if code != 1 || rep.Missing != len(ids) || rep.Unchecked != 0 || rep.Changed {
				t.Fatalf("exit %d, missing %d, unchecked %d, changed %v; want 1, %d, 0, false\n%s", code, rep.Missing, rep.Unchecked, rep.Changed, len(ids), out)
			}
		})
	}
}

// The periodic windows never pass rows the server outboxd reads has not applied yet: on a
// replica lagging more than reconcile.delay they stop at the checkpoint's commit time (a point
// the replica has reached), not at the replica's NOW() - delay, which would move the mark past
// the rows still on their way from the primary, and no run would ever check them.
func TestReconcilePeriodicReplicaLag(t *testing.T) {
	pair := replication.StartPair(t, replication.Options{})
	w := newWorld(t, pair.Primary())
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	o.Srv = pair.Replica() // reads the replica
	o.Extra = "reconcile: {interval: 1s, window: 1s, delay: 1s, slack: 1m}\n"
	path := reconcileCfg(t, o, "lag.yaml")
	c := newConsumer(t, kc, "orders")
	w.commit(row{EventID: "before", Key: "k", Topic: "orders", Payload: []byte("p")})
	logs, _ := reconcileDaemon(t, path, nil)
	c.waitFor(1, 30*time.Second)
	waitMissing(t, logs, nil, 30*time.Second) // a run behind the delivered row

	replica := serverDB(t, pair.Replica())
	if _, err := replica.Exec("STOP SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		w.commit(row{EventID: fmt.Sprintf("lagging%d", i), Key: "k", Topic: "orders", Payload: []byte("p")})
	}
	var firstLagging time.Time
	if err := w.db.QueryRow("SELECT MIN(created_at) FROM " + w.schema + ".outbox_event WHERE event_id LIKE 'lagging%'").Scan(&firstLagging); err != nil {
		t.Fatal(err)
	}
	// Several runs while the replica lags by more than the delay.
	time.Sleep(5 * time.Second)
	b, err := os.ReadFile(filepath.Join(o.Dir, "checkpoint.json.reconcile"))
	if err != nil {
		t.Fatal(err)
	}
	var mark struct {
		At time.Time `json:"reconciled_through"`
	}
	if err := json.Unmarshal(b, &mark); err != nil {
		t.Fatal(err)
	}
	if mark.At.After(firstLagging) {
		t.Fatalf("the mark moved to %s, past rows the replica has not applied (the first created %s): no run will check them",
			mark.At.Format(time.RFC3339Nano), firstLagging.Format(time.RFC3339Nano))
	}
	if _, err := replica.Exec("START SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	c.waitFor(6, 30*time.Second)
}
