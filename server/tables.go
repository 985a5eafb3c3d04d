package server

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// BaseTables lists the base tables ("schema.table", sorted, names as the server stores them,
// which is how the binlog names them) whose schema starts with schemaPrefix, among those the
// account can see. Views are left out: they have no rows in the binlog. It blocks on one query;
// an error names it.
func BaseTables(ctx context.Context, db *sql.DB, schemaPrefix string) ([]string, error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(schemaPrefix) + "%"
	rows, err := db.QueryContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "+
		"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA LIKE ? ORDER BY TABLE_SCHEMA, TABLE_NAME", like)
	if err != nil {
		return nil, fmt.Errorf("list the tables of schemas %s: %w", like, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s, t string
		if err := rows.Scan(&s, &t); err != nil {
			return nil, fmt.Errorf("list the tables of schemas %s: %w", like, err)
		}
		out = append(out, s+"."+t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the tables of schemas %s: %w", like, err)
	}
	return out, nil
}
