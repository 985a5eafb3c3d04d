package preflight

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
)

// CheckReconcile is the Item.Check of check's line about the periodic reconcile.
const CheckReconcile = "reconcile"

// createdAtProblems reports each configured tables[].columns.created_at that exists but is not
// a DATETIME or TIMESTAMP column (a missing one is the table_columns check's), so check and
// run refuse it with the same line reconcile would fail with later. It blocks on one query per
// table with the column configured.
func createdAtProblems(ctx context.Context, db *sql.DB, cfg *config.Config) ([]Problem, error) {
	var ps []Problem
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
			switch typ := strings.ToLower(d.DataType); {
			case typ != "datetime" && typ != "timestamp":
				ps = append(ps, Problem{
					Setting: "column " + t.Table + "." + d.Name, Check: CheckTableColumns, Table: t.Table,
					Found: d.ColumnType + " (configured as " + t.Field(i) + ".columns.created_at)",
					Fix:   "set " + t.Field(i) + ".columns.created_at to the table's DATETIME or TIMESTAMP insert-time column (reconcile selects rows by it)",
				})
			case typ == "datetime" && cfg.Reconcile != nil && cfg.CreatedAtTimeZone(i) == "" && !sweeps(cfg, i):
				// The sweep's own check (cleanup_table) says the same for a swept table.
				ps = append(ps, Problem{
					Setting: "column " + t.Table + "." + d.Name, Check: CheckTableColumns, Table: t.Table,
					Found: "a DATETIME (wall-clock time in whatever time_zone the inserting session had) without cleanup.time_zone, which reconcile reads it in",
					Fix:   reconcile.ZoneFix(i),
				})
			}
		}
	}
	return ps, nil
}

// sweeps reports whether tables[i] is cleaned by the created_at sweep. Pure.
func sweeps(cfg *config.Config, i int) bool {
	s, ok := cfg.CleanupFor(i)
	return ok && s.Sweeps()
}

// reconcileItem is check's line for the periodic reconcile: what it reads, with which
// privileges (the table SELECT is verified above with the tables; the brokers' read
// permissions only show at the first run).
func reconcileItem(cfg *config.Config) (Item, bool) {
	if cfg.Reconcile == nil {
		return Item{}, false
	}
	msg := fmt.Sprintf("every %s on the leader, from the mark kept with the checkpoint to the database's NOW()-%s, in windows of at most %s (the first run starts at NOW()-%s-%s); read-only: SELECT on the outbox tables, Kafka Describe and Read on the route topics, RocketMQ SUB on them and on group %s (no offset committed)",
		cfg.Reconcile.Interval, cfg.Reconcile.Delay, cfg.Reconcile.Window, cfg.Reconcile.Delay, cfg.Reconcile.Window, reconcile.ReconcileGroup)
	return Item{Check: CheckReconcile, Subject: "reconcile", Message: msg, line: "reconcile: " + msg}, true
}
