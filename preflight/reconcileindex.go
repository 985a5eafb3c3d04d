package preflight

import (
	"context"
	"database/sql"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/reconcile"
)

// reconcileIndexWarnings warns, with the periodic reconcile on, about each outbox table whose
// created_at column leads no index: every run reads its window in slices by that column, and
// without an index each slice scans the table. A warning, not a problem: the results are the
// same, only the load on the source differs. It blocks on one query per table; a server that
// cannot answer gets no warning.
func reconcileIndexWarnings(ctx context.Context, db *sql.DB, cfg *config.Config) ([]Problem, error) {
	if cfg.Reconcile == nil {
		return nil, nil
	}
	tables, err := reconcile.UnindexedCreatedAt(ctx, db, cfg)
	if err != nil {
		return nil, nil // a server without information_schema.STATISTICS: nothing to advise on
	}
	var ps []Problem
	for _, t := range tables {
		table := t.Table
		ps = append(ps, Problem{
			Setting: "column " + table + "." + t.Columns.CreatedAt, Check: CheckReconcile, Table: table, Warning: true,
			Found: "the first column of no index (reconcile reads its window in slices by it: each slice scans the table)",
			Fix:   "ALTER TABLE " + table + " ADD INDEX (" + t.Columns.CreatedAt + ")",
		})
	}
	return ps, nil
}
