package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// The outbox life cycle under faults: cleanup (by key, and the created_at sweep for the keys a
// kill -9 loses) and the periodic reconcile run in every chaos world, and the verdict adds
//
//   - the table-is-the-last-copy invariant: every committed row is on the broker, or in the
//     table, or both. A trigger records each row cleanup deletes (outbox_deleted); a deleted
//     row the consumers never got is a violation. Rows that committed are the table's rows plus
//     the deleted ones.
//   - dark rows: now and then a row is committed with sql_log_bin=0, as rows written beside
//     the binlog are (the rows backfill exists for). No relay can see them, so they must never
//     be delivered, never be deleted, and must be what reconcile reports missing.
//   - a cross-check of reconcile: at the end `outboxd reconcile` over the whole run must report
//     missing exactly the rows in the table that no consumer got.

// deletedTable is where the trigger records deleted outbox rows.
const deletedTable = schema + ".outbox_deleted"

// darkPrefix starts the event id of every dark row.
const darkPrefix = "dark-"

// setupLifecycle creates the deleted-row log and its trigger. Statements run on the primary
// and replicate (the trigger's inserts are logged as rows).
func (w *world) setupLifecycle(ctx context.Context) error {
	for _, q := range []string{
		"CREATE TABLE " + deletedTable + " (event_id VARCHAR(64) NOT NULL PRIMARY KEY, deleted_at DATETIME(6) NOT NULL)",
		"CREATE TRIGGER " + schema + ".outbox_event_deleted AFTER DELETE ON " + schema + ".outbox_event FOR EACH ROW " +
			"INSERT INTO " + deletedTable + " (event_id, deleted_at) VALUES (OLD.event_id, NOW(6))",
	} {
		if _, err := w.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// lifecycleYAML is the outbox table's created_at column and the cleanup and reconcile blocks:
// retention 0 deletes by key, and the sweep (every 2 s) takes the rows whose keys a kill -9
// lost. The generator writes created_at in its sessions' zone, the server's (SYSTEM).
func (w *world) lifecycleYAML() string {
	return `    columns: {created_at: created_at}
cleanup: {retention: 0s, interval: 2s, commit_margin: 1s, time_zone: SYSTEM}
reconcile: {interval: 5s, window: 5s, delay: 10s, slack: 30s}
`
}

// deletedIDs reads the deleted-row log (retrying while the primary restarts).
func (w *world) deletedIDs(ctx context.Context) (map[string]time.Time, error) {
	var lastErr error
	for range 30 {
		out, err := readDeleted(ctx, w.db)
		if err == nil {
			return out, nil
		}
		lastErr = err
		sleepCtx(ctx, time.Second)
	}
	return nil, fmt.Errorf("read %s: %w", deletedTable, lastErr)
}

func readDeleted(ctx context.Context, db *sql.DB) (map[string]time.Time, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id, deleted_at FROM "+deletedTable)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = at
	}
	return out, rows.Err()
}

// everCommitted is every row db's outbox table ever held: its rows and the ones cleanup deleted.
func everCommitted(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	ids, err := mariadb.EventIDs(ctx, db, outboxTable)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table: %w", err)
	}
	deleted, err := readDeleted(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", deletedTable, err)
	}
	for id := range deleted {
		ids[id] = true
	}
	return ids, nil
}

// splitDark removes the dark rows from ids and returns them.
func splitDark(ids map[string]bool) map[string]bool {
	dark := map[string]bool{}
	for id := range ids {
		if strings.HasPrefix(id, darkPrefix) {
			dark[id] = true
			delete(ids, id)
		}
	}
	return dark
}

// drainCleanup waits, up to bound, for cleanup to leave in the table only the rows no consumer
// got; it returns how many delivered rows were still there at the end (a sweep that does not
// converge, not a safety problem).
func (w *world) drainCleanup(ctx context.Context, cons *kafkaConsumer, bound time.Duration) (left int) {
	deadline := time.Now().Add(bound)
	for {
		ids, err := mariadb.EventIDs(ctx, w.db, outboxTable)
		if err == nil {
			got := collect(cons, w.rmq)
			left = 0
			for id := range ids {
				if _, ok := got.first[id]; ok {
					left++
				}
			}
			if left == 0 {
				return 0
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		sleepCtx(ctx, time.Second)
	}
}

// lifecycleVerdict fills the report's life-cycle counts: deleted rows never delivered, dark
// rows delivered or deleted, and the reconcile cross-check against what the table holds
// undelivered now.
func (w *world) lifecycleVerdict(ctx context.Context, rep *Report, deleted map[string]time.Time, got deliveries, since time.Time) {
	rep.CleanupDeleted = len(deleted)
	for id := range deleted {
		if strings.HasPrefix(id, darkPrefix) {
			rep.DarkDeleted++
			rep.example("cleanup deleted dark row %s (never in the binlog, never delivered)", id)
			continue
		}
		if _, ok := got.first[id]; !ok {
			rep.DeletedUndelivered++
			rep.example("cleanup deleted %s, which no consumer got: the only copy is gone", id)
		}
	}
	w.gen.mu.Lock()
	for id, row := range w.gen.rows {
		if strings.HasPrefix(id, darkPrefix) && row.State == stCommitted {
			rep.DarkRows++
		}
	}
	w.gen.mu.Unlock()
	inTable, err := mariadb.EventIDs(ctx, w.db, outboxTable)
	if err != nil {
		rep.ReconcileError = "read the table: " + err.Error()
		return
	}
	var want []string // in the table, delivered to nobody
	for id := range inTable {
		if strings.HasPrefix(id, darkPrefix) {
			rep.DarkInTable++
		}
		if _, ok := got.first[id]; !ok {
			want = append(want, id)
		}
	}
	rep.LeftUndelivered = len(want)
	reported, err := w.reconcileMissing(ctx, since)
	if err != nil {
		rep.ReconcileError = err.Error()
		return
	}
	rep.ReconcileMissing = len(reported)
	slices.Sort(want)
	slices.Sort(reported)
	for _, id := range want {
		if _, ok := slices.BinarySearch(reported, id); !ok {
			rep.ReconcileMismatch++
			rep.example("reconcile did not report %s, which is in the table and was delivered to nobody", id)
		}
	}
	for _, id := range reported {
		if _, ok := slices.BinarySearch(want, id); !ok {
			rep.ReconcileMismatch++
			rep.example("reconcile reported %s missing, which a consumer got (or the table lacks)", id)
		}
	}
}

// reconcileMissing runs `outboxd reconcile` over the whole run with the first instance's config
// pointed at the current primary (a replica lacks the dark rows written on the primary; a
// failover leaves dark rows behind on the demoted one) and returns the event ids it reports
// missing. Exit status 1 is its "missing" verdict.
func (w *world) reconcileMissing(ctx context.Context, since time.Time) ([]string, error) {
	ob := w.obds[0]
	b, err := os.ReadFile(ob.cfg)
	if err != nil {
		return nil, err
	}
	cfg := strings.Replace(string(b), w.sourceYAML(ob), "  addr: "+w.srv.Addr+"\n", 1)
	path := ob.cfg + ".reconcile.yaml"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, ob.bin, "reconcile", "--config", path, "--json",
		"--since", since.UTC().Format(time.RFC3339Nano), "--until", "now")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		return nil, fmt.Errorf("outboxd reconcile: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	var r struct {
		Missing  int  `json:"missing"`
		Truncate bool `json:"lists_truncated"`
		Events   []struct {
			EventID string `json:"event_id"`
		} `json:"missing_events"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("outboxd reconcile: read its JSON: %w (%s)", err, strings.TrimSpace(errb.String()))
	}
	if r.Truncate {
		return nil, fmt.Errorf("outboxd reconcile: %d missing, more than its lists hold", r.Missing)
	}
	ids := make([]string, 0, len(r.Events))
	for _, e := range r.Events {
		ids = append(ids, e.EventID)
	}
	return ids, nil
}

// periodicReconciles counts the periodic reconcile runs the instances logged.
func (w *world) periodicReconciles() int {
	n := 0
	for _, ob := range w.obds {
		b, err := os.ReadFile(ob.logPath)
		if err == nil {
			n += bytes.Count(b, []byte(`"message":"periodic reconcile"`))
		}
	}
	return n
}
