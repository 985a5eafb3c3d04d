package reconcile

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxd/outboxd/config"
)

// UnindexedCreatedAt returns the configured tables whose
// tables[].columns.created_at column does not lead any index. Reconcile reads its window in
// slices by that column (see check): with an index each slice is a range read, without one
// each slice scans the table, and a window of many slices scans it many times. Tables without
// created_at configured, or not found, are not listed. It blocks on one query per table.
func UnindexedCreatedAt(ctx context.Context, db *sql.DB, cfg *config.Config) ([]config.Table, error) {
	var out []config.Table
	for _, t := range cfg.Tables {
		if t.Columns.CreatedAt == "" {
			continue
		}
		var indexed, exists int
		err := db.QueryRowContext(ctx, `SELECT
			COUNT(CASE WHEN s.SEQ_IN_INDEX = 1 AND s.COLUMN_NAME = ? THEN 1 END),
			(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?)
			FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ?`,
			t.Columns.CreatedAt, t.Schema(), t.Name(), t.Schema(), t.Name()).Scan(&indexed, &exists)
		if err != nil {
			return nil, fmt.Errorf("reconcile: indexes of %s: %w", t.Table, err)
		}
		if exists > 0 && indexed == 0 {
			out = append(out, t)
		}
	}
	return out, nil
}
