package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/server"
)

// Stable names of the mysql checkpoint store's checks (run on checkpoint.writer_addr); see
// servercheck.
const (
	CheckCheckpointTable  = servercheck.CheckpointTable
	CheckCheckpointGrants = servercheck.CheckpointGrants
	CheckCheckpointWriter = servercheck.CheckpointWriter
)

// readOnlyProblem is the CheckCheckpointWriter problem of a read-only writer, nil otherwise.
func readOnlyProblem(ctx context.Context, db *sql.DB) (*Problem, error) {
	ro, err := server.ReadOnly(ctx, db)
	if err != nil || !ro {
		return nil, err
	}
	return &Problem{
		Setting: "read_only", Check: CheckCheckpointWriter, Found: "ON on checkpoint.writer_addr (a replica?)",
		Fix: "point checkpoint.writer_addr at the writable primary: the checkpoint row and the leader lock must live where the data is written (a lock is not replicated, so instances pointed at different replicas would all lead)",
	}, nil
}

// CheckpointTable is what InspectCheckpoint verifies.
type CheckpointTable struct {
	Flavor gtid.Flavor
	// Name is "schema.table"; Columns are the columns the store reads and writes.
	Name    string
	Columns []string
	// CreateTable is the DDL that fixes a missing table; Grant returns the GRANT that fixes a
	// missing privilege for an account ('user'@'host').
	CreateTable string
	Grant       func(account string) string
	// AddColumn returns the ALTER TABLE that adds a column added to the store after its
	// first release to an existing table ("" for the others: the table is created anew). A
	// table lacking only such columns is fixed with them.
	AddColumn func(column string) string
	// Skip names checks whose problems are reported with Skipped set (source.skip_checks).
	Skip []string
}

// storePrivs are the privileges the store needs, and no more, on its table.
var storePrivs = []string{"SELECT", "INSERT", "UPDATE"}

// InspectCheckpoint verifies the checkpoint table on the writer: that it exists with its
// columns, and that the account holds SELECT, INSERT and UPDATE on it. Each problem's Fix is the
// CREATE TABLE or GRANT to run. It blocks on a few queries; an error means the server could not
// be inspected, not that a check failed. Safe for concurrent use.
func InspectCheckpoint(ctx context.Context, db *sql.DB, t CheckpointTable) ([]Problem, error) {
	schema, table, ok := strings.Cut(t.Name, ".")
	if !ok || schema == "" || table == "" {
		return nil, fmt.Errorf("checkpoint table %q: want schema.table", t.Name)
	}
	user, gs, err := account(ctx, db, t.Flavor)
	if err != nil {
		return nil, err
	}
	var ps []Problem
	var missing []string
	for _, p := range storePrivs {
		if !gs.can(p, schema, table) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		ps = append(ps, Problem{
			Setting: strings.Join(missing, ", ") + " ON " + t.Name, Check: CheckCheckpointGrants, Table: t.Name,
			Found: "not granted to " + user + " (the checkpoint store reads and writes one row of the table)",
			Fix:   t.Grant(user) + ";",
		})
	}
	rows, err := db.QueryContext(ctx, "SELECT * FROM "+sqlident.Table(schema, table)+" LIMIT 0")
	if err == nil {
		rows.Close()
		have, err := (&server.ColumnReader{DB: db}).Columns(ctx, schema, table)
		if err != nil {
			return nil, err
		}
		var lack []string
		for _, c := range t.Columns {
			if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, c) }) {
				lack = append(lack, c)
			}
		}
		if len(lack) > 0 {
			fix := "create the table as outboxd writes it (rename the old one first): " + t.CreateTable + ";"
			var alters []string
			for _, c := range lack {
				if t.AddColumn != nil && t.AddColumn(c) != "" {
					alters = append(alters, t.AddColumn(c)+";")
				}
			}
			if len(alters) == len(lack) {
				fix = "add what this outboxd version writes (the table was created by an older one): " + strings.Join(alters, " ")
			}
			ps = append(ps, Problem{
				Setting: "table " + t.Name, Check: CheckCheckpointTable, Table: t.Name,
				Found: "lacks the columns " + strings.Join(lack, ", "), Fix: fix,
			})
		}
	} else {
		var me *mysql.MySQLError
		if !errors.As(err, &me) {
			return nil, fmt.Errorf("check checkpoint table %s: %w", t.Name, err)
		}
		switch me.Number {
		case erNoSuchTable, erBadDB:
			ps = append(ps, Problem{
				Setting: "table " + t.Name, Check: CheckCheckpointTable, Table: t.Name,
				Found: "missing (" + me.Message + ")",
				Fix:   "create it (CREATE DATABASE IF NOT EXISTS " + sqlident.Quote(schema) + "; first if needed): " + t.CreateTable + "; then " + t.Grant(user) + ";",
			})
		case erTableAccessDenied, erColumnAccessDenied:
			if len(missing) == 0 {
				return nil, fmt.Errorf("check checkpoint table %s: %w", t.Name, err)
			}
			// The grant problem above says what to run; a table that does not exist makes that
			// GRANT fail, so name the DDL too.
			ps[len(ps)-1].Fix += " (if the table does not exist yet, a table GRANT fails: first " + t.CreateTable + ";)"
		default:
			return nil, fmt.Errorf("check checkpoint table %s: %w", t.Name, err)
		}
	}
	ro, err := readOnlyProblem(ctx, db)
	if err != nil {
		return nil, err
	}
	if ro != nil {
		ps = append(ps, *ro)
	}
	markSkipped(ps, t.Skip)
	return ps, nil
}
