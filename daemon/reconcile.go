package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/reconcile"
)

// CheckReconcile is the CheckItem.Check of check's line about the periodic reconcile.
const CheckReconcile = "reconcile"

// maxLoggedEvents bounds the event ids a reconcile log line names; the full list goes to
// reconcile.out.
const maxLoggedEvents = 20

// reconcileLoop runs reconcile every reconcile.interval while this process leads (a standby's
// run would repeat the leader's reads and double the alert), over the window that ends
// reconcile.delay ago. A run only reads; a failed run is counted and logged and the next one
// comes at the next interval. It returns when ctx ends.
func (o *ops) reconcileLoop(ctx context.Context) {
	rc := o.cfg.Reconcile
	log := o.log.With().Str("component", "reconcile").Logger()
	readers, err := reconcile.OpenReaders(o.cfg)
	if err != nil {
		log.Error().Err(err).Msg("periodic reconcile is off: its broker readers cannot be built")
		return
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	tick := time.NewTicker(rc.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !o.role.leading() {
			continue
		}
		now := time.Now()
		w := reconcile.Window{Since: now.Add(-rc.Delay - rc.Window), Until: now.Add(-rc.Delay)}
		addr, db := o.src.current()
		if db == nil {
			o.m.ReconcileFailedRun()
			log.Error().Str("source", addr).Msg("periodic reconcile skipped: no connection to the source; the next run is at the next interval")
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, rc.Interval)
		rep, err := reconcile.Run(rctx, db, o.cfg, reconcile.Options{Window: w, Before: rc.Slack, After: rc.Slack, Readers: readers})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			o.m.ReconcileFailedRun()
			log.Error().Err(err).Str("since", logging.Time(w.Since)).Str("until", logging.Time(w.Until)).Msg("periodic reconcile could not complete; the next run is at the next interval")
			continue
		}
		o.m.ReconcileRun(rep.Checked, rep.Missing, rep.Duplicated)
		if rc.Out != "" {
			if err := writeReport(rc.Out, rep); err != nil {
				log.Error().Err(err).Str("path", rc.Out).Msg("reconcile.out not written")
			}
		}
		ev := log.Info()
		if !rep.OK() {
			ev = log.Error()
		}
		ids := make([]string, 0, min(len(rep.MissingEvents), maxLoggedEvents))
		for _, e := range rep.MissingEvents[:min(len(rep.MissingEvents), maxLoggedEvents)] {
			ids = append(ids, e.EventID)
		}
		ev.Str("since", logging.Time(w.Since)).Str("until", logging.Time(w.Until)).Int("checked", rep.Checked).Int("found", rep.Found).
			Int("dead_lettered", rep.DeadLettered).Int("missing", rep.Missing).Int("duplicated", rep.Duplicated).
			Strs("missing_event_ids", ids).Msg("periodic reconcile")
	}
}

// writeReport replaces path with rep as JSON (a temporary file renamed over it, so a reader
// never sees half a report).
func writeReport(path string, rep reconcile.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".reconcile-*.json")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// createdAtProblems reports each configured tables[].columns.created_at that exists but is not
// a DATETIME or TIMESTAMP column (a missing one is the table_columns check's), so check and
// run refuse it with the same line reconcile would fail with later. It blocks on one query per
// table with the column configured.
func createdAtProblems(ctx context.Context, db *sql.DB, cfg *config.Config) ([]server.Problem, error) {
	var ps []server.Problem
	for i, t := range cfg.Tables {
		col := t.Columns.CreatedAt
		if col == "" {
			continue
		}
		defs, err := (&server.ColumnReader{DB: db}).Definitions(ctx, t.Schema(), t.Name())
		if err != nil {
			continue // a missing or unreadable table is the table checks' problem
		}
		for _, d := range defs {
			if !strings.EqualFold(d.Name, col) {
				continue
			}
			if typ := strings.ToLower(d.DataType); typ != "datetime" && typ != "timestamp" {
				ps = append(ps, server.Problem{
					Setting: "column " + t.Table + "." + d.Name, Check: server.CheckTableColumns, Table: t.Table,
					Found: d.ColumnType + " (configured as " + fmt.Sprintf("tables[%d].columns.created_at", i) + ")",
					Fix:   "set tables[" + strconv.Itoa(i) + "].columns.created_at to the table's DATETIME or TIMESTAMP insert-time column (reconcile selects rows by it)",
				})
			}
		}
	}
	return ps, nil
}

// reconcileItem is check's line for the periodic reconcile: what it reads, with which
// privileges (the table SELECT is verified above with the tables; the brokers' read
// permissions only show at the first run).
func reconcileItem(cfg *config.Config) (CheckItem, bool) {
	if cfg.Reconcile == nil {
		return CheckItem{}, false
	}
	msg := fmt.Sprintf("every %s on the leader, the window [now-%s-%s, now-%s); read-only: SELECT on the outbox tables, Kafka Describe and Read on the route topics, RocketMQ SUB on them and on group %s (no offset committed)",
		cfg.Reconcile.Interval, cfg.Reconcile.Delay, cfg.Reconcile.Window, cfg.Reconcile.Delay, reconcile.ReconcileGroup)
	return CheckItem{Check: CheckReconcile, Subject: "reconcile", Message: msg, line: "reconcile: " + msg}, true
}
