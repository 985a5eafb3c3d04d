package mariadb

import (
	"context"
	"database/sql"
)

// EventIDs is the set of event ids in table (schema.table, an outbox table) on db, or the
// query's error: what the e2e tests and the chaos verdict compare with what consumers got.
func EventIDs(ctx context.Context, db *sql.DB, table string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id FROM "+table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
