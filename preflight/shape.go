package preflight

import (
	"context"
	"database/sql"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// shapeColumns are the message-shape columns of t (columns.timestamp, columns.partition,
// extra_headers) for the table_columns check: each is required, a row without it is poison.
func shapeColumns(t config.Table) []RoleColumn {
	var out []RoleColumn
	if c := t.Columns.Timestamp; c != "" {
		out = append(out, RoleColumn{Name: c, Role: "timestamp", Required: true, Type: "DATETIME(3) NOT NULL"})
	}
	if c := t.Columns.Partition; c != "" {
		out = append(out, RoleColumn{Name: c, Role: "partition", Required: true, Type: "INT NULL"})
	}
	cols, _ := t.ExtraHeaderColumns()
	for _, c := range cols {
		out = append(out, RoleColumn{Name: c, Role: "extra_headers." + c, Required: true, Type: "VARCHAR(255) NULL"})
	}
	return out
}

// shapeProblems reports timestamp and partition columns of a type outboxd cannot read
// (config.Table.ShapeColumnProblems), so check and run refuse them with the same line. It
// blocks on one query per table with such a column.
func shapeProblems(ctx context.Context, db *sql.DB, cfg *config.Config) ([]Problem, error) {
	var ps []Problem
	for i, t := range cfg.Tables {
		if t.Columns.Timestamp == "" && t.Columns.Partition == "" {
			continue
		}
		defs, err := (&server.ColumnReader{DB: db}).Definitions(ctx, t.Schema(), t.Name())
		if err != nil {
			continue // a missing or unreadable table is the table checks' problem
		}
		ps = append(ps, t.ShapeColumnProblems(t.Field(i), defs)...)
	}
	return ps, nil
}
