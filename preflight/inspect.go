package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/server"
)

// Stable check names: what Problem.Check holds and source.skip_checks takes. The variable
// checks are named after their variable. They live in servercheck, a leaf config imports.
const (
	CheckFlavor            = servercheck.Flavor
	CheckLogBin            = servercheck.LogBin
	CheckBinlogFormat      = servercheck.BinlogFormat
	CheckBinlogRowImage    = servercheck.BinlogRowImage
	CheckBinlogRowMetadata = servercheck.BinlogRowMetadata
	CheckServerID          = servercheck.ServerID
	CheckGTIDMode          = servercheck.GTIDMode
	CheckEnforceGTID       = servercheck.EnforceGTID
	CheckGTIDStrictMode    = servercheck.GTIDStrictMode
	CheckReplicationSlave  = servercheck.ReplicationSlave
	CheckReplicationClient = servercheck.ReplicationClient
	CheckTableSelect       = servercheck.TableSelect
	CheckTableExists       = servercheck.TableExists
	CheckTableColumns      = servercheck.TableColumns
)

// CheckNames returns every check name, in the order Inspect runs them. Pure.
func CheckNames() []string { return servercheck.Names() }

// Request says what Inspect verifies.
type Request struct {
	// Flavor is the configured source.flavor.
	Flavor gtid.Flavor
	Tables []Table
	// AllowMinimalRowMetadata turns binlog_row_metadata other than FULL from a problem into a
	// warning (source.allow_minimal_row_metadata).
	AllowMinimalRowMetadata bool
	// Skip names checks whose problems are reported with Skipped set (source.skip_checks).
	Skip []string
	// MinBinlogRetention is source.min_binlog_retention: a shorter binlog retention is a
	// warning. 0 skips the retention check.
	MinBinlogRetention time.Duration
}

// Table is one outbox table to verify.
type Table struct {
	// Name is "schema.table".
	Name string
	// Field is the table's config path for fixes, such as "tables[0]"; "" for none.
	Field string
	// Columns are the configured columns; none skips the column check.
	Columns []RoleColumn
}

// RoleColumn is one configured outbox column: the column that plays an outbox role.
type RoleColumn struct {
	Name string // the column name in the table
	Role string // the tables[].columns key: event_id, key, topic, payload, event_type, headers
	// Required: a row without the column can never be delivered (the router treats it as
	// poison), so its absence is a problem; an optional one only loses a header, a warning.
	Required bool
	// Type is a column definition for the ALTER TABLE fix, such as "VARCHAR(64) NOT NULL".
	Type string
}

// Inspect verifies the server's flavor, binlog settings, the current account's privileges and
// every outbox table with its configured columns, and reports each problem with what to change.
// Hard problems come first, then warnings; a problem of a skipped check is returned with Skipped
// set (and counts as neither). When the server is of the other flavor only that problem is
// returned (the rest would be checked with the wrong recipes) unless the flavor check is
// skipped. It blocks on a few queries per table; an error means the server could not be
// inspected (and says which query failed), not that a check failed. Safe for concurrent use.
func Inspect(ctx context.Context, db *sql.DB, req Request) ([]Problem, error) {
	f := req.Flavor
	if err := server.KnownFlavor(f); err != nil {
		return nil, err
	}
	type tableName struct {
		schema, table string
		Table
	}
	var names []tableName
	for _, t := range req.Tables {
		schema, table, ok := strings.Cut(t.Name, ".")
		if !ok || schema == "" || table == "" {
			return nil, fmt.Errorf("outbox table %q: want schema.table", t.Name)
		}
		names = append(names, tableName{schema, table, t})
	}
	fp, err := checkServerFlavor(ctx, db, f)
	if err != nil {
		return nil, err
	}
	if fp != nil && !slices.Contains(req.Skip, CheckFlavor) {
		return []Problem{*fp}, nil
	}
	var ps []Problem
	if fp != nil {
		ps = append(ps, *fp)
	}

	vars, err := server.GlobalVars(ctx, db)
	if err != nil {
		return nil, err
	}
	ps = append(ps, checkVars(f, vars, req.AllowMinimalRowMetadata)...)
	if req.MinBinlogRetention > 0 {
		r, err := server.BinlogRetention(ctx, db)
		if err != nil {
			return nil, err
		}
		if p := RetentionProblem(f, r, req.MinBinlogRetention); p != nil {
			ps = append(ps, *p)
		}
	}

	user, gs, err := account(ctx, db, f)
	if err != nil {
		return nil, err
	}
	if !gs.hasGlobal("REPLICATION SLAVE", "REPLICATION REPLICA") {
		ps = append(ps, Problem{
			Setting: "REPLICATION SLAVE", Check: CheckReplicationSlave,
			Found: "not granted to " + user + " (the binlog stream fails with a misleading ERROR 1045 Access denied)",
			Fix:   "GRANT REPLICATION SLAVE ON *.* TO " + user + ";",
		})
	}
	clientPrivs := []string{"REPLICATION CLIENT", "SUPER"}
	found := "not granted to " + user
	if f == gtid.MariaDB {
		// MariaDB 10.5+ prints REPLICATION CLIENT as BINLOG MONITOR, and SUPER no longer allows
		// SHOW BINLOG EVENTS.
		clientPrivs = []string{"BINLOG MONITOR", "REPLICATION CLIENT"}
		found = "not granted to " + user + " (SHOW GRANTS shows neither BINLOG MONITOR nor REPLICATION CLIENT)"
	}
	if !gs.hasGlobal(clientPrivs...) {
		ps = append(ps, Problem{
			Setting: "REPLICATION CLIENT", Check: CheckReplicationClient, Found: found,
			Fix: "GRANT REPLICATION CLIENT ON *.* TO " + user + "; (needed for SHOW BINARY LOGS and reading purged GTIDs)",
		})
	}
	for _, n := range names {
		tps, err := checkTable(ctx, db, user, n.schema, n.table, n.Table)
		if err != nil {
			return nil, err
		}
		for i := range tps {
			tps[i].Table = n.Name
		}
		ps = append(ps, tps...)
	}
	markSkipped(ps, req.Skip)
	// Hard problems first: an operator fixes those before anything else.
	out := make([]Problem, 0, len(ps))
	out = append(out, Fatal(ps)...)
	for _, p := range ps {
		if p.Warning || p.Skipped {
			out = append(out, p)
		}
	}
	return out, nil
}

// markSkipped sets Skipped on each problem whose check skip names.
func markSkipped(ps []Problem, skip []string) {
	for i := range ps {
		ps[i].Skipped = slices.Contains(skip, ps[i].Check)
	}
}

// Fatal returns the problems that keep outboxd from running: neither warnings nor skipped. Pure.
func Fatal(ps []Problem) []Problem {
	var out []Problem
	for _, p := range ps {
		if !p.Warning && !p.Skipped {
			out = append(out, p)
		}
	}
	return out
}

// checkServerFlavor returns a problem when the server is not of flavor f. MariaDB says so in
// VERSION() ("10.11.6-MariaDB-log") or, behind some proxies, in @@version_comment; anything else
// speaks the MySQL flavor (MySQL, Percona, Dolt, ...).
func checkServerFlavor(ctx context.Context, db *sql.DB, f gtid.Flavor) (*Problem, error) {
	var version, comment sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("read the server version (SELECT VERSION()): %w", err)
	}
	// Not every MySQL-compatible server has @@version_comment; VERSION() decides without it.
	_ = db.QueryRowContext(ctx, "SELECT @@version_comment").Scan(&comment)
	isMaria := IsMariaDB(version.String, comment.String)
	switch {
	case f == gtid.MySQL && isMaria:
		return &Problem{
			Setting: "source.flavor", Check: CheckFlavor,
			Found: "mysql, but this server is MariaDB (VERSION() " + version.String + ")",
			Fix:   "this server is MariaDB: set source.flavor: mariadb (MariaDB's GTIDs, grants and variables differ from MySQL's), then run outboxd check again",
		}, nil
	case f == gtid.MariaDB && !isMaria:
		return &Problem{
			Setting: "source.flavor", Check: CheckFlavor,
			Found: "mariadb, but this server is not MariaDB (VERSION() " + version.String + ", " + comment.String + ")",
			Fix:   "this server speaks the MySQL flavor: set source.flavor: mysql, then run outboxd check again",
		}, nil
	}
	return nil, nil
}

// IsMariaDB reports whether a server's VERSION() and @@version_comment are MariaDB's. Pure.
func IsMariaDB(version, comment string) bool {
	return strings.Contains(strings.ToLower(version), "mariadb") || strings.Contains(strings.ToLower(comment), "mariadb")
}

// MySQL error numbers of a table probe.
const (
	erTableAccessDenied  = 1142 // SELECT command denied to user for table
	erColumnAccessDenied = 1143
	erNoSuchTable        = 1146
	erBadDB              = 1049
)

// checkTable verifies one outbox table: that the account can read it and, when it can, that
// it has the configured columns. The server decides, not the grant parser: a SELECT ... LIMIT 0
// fails with ERROR 1146 for a table that does not exist and with 1142 for one the account may
// not read; the server answers 1142 for a missing table too when the account has no privilege
// on it (it does not tell strangers what exists), and then a GRANT would fail (a table-level
// GRANT needs the table), so the table name is what to check first.
func checkTable(ctx context.Context, db *sql.DB, user, schema, table string, t Table) ([]Problem, error) {
	q := sqlident.Table(schema, table)
	nameField := "the table name in the outboxd config"
	if t.Field != "" {
		nameField = t.Field + ".table"
	}
	rows, err := db.QueryContext(ctx, "SELECT * FROM "+q+" LIMIT 0")
	if err == nil {
		rows.Close()
		if p, err := checkTableNameCase(ctx, db, schema, table, nameField); p != nil || err != nil {
			return p, err
		}
		return checkColumns(ctx, db, schema, table, t)
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return nil, fmt.Errorf("check outbox table %s.%s: %w", schema, table, err)
	}
	visible, err := visibleTables(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	seen := "the account sees no table in " + sqlident.Quote(schema)
	if len(visible) > 0 {
		seen = "the tables of " + sqlident.Quote(schema) + " the account can see: " + strings.Join(visible, ", ")
	}
	switch me.Number {
	case erNoSuchTable, erBadDB:
		return []Problem{{
			Setting: "table " + schema + "." + table, Check: CheckTableExists,
			Found: "missing (" + me.Message + ")",
			Fix:   "check the table name (" + nameField + "; " + seen + "), or create the outbox table " + q,
		}}, nil
	case erTableAccessDenied, erColumnAccessDenied:
		if slices.Contains(visible, table) {
			// The account has some privilege on the table, so it exists: the GRANT works.
			return []Problem{{
				Setting: "SELECT ON " + q, Check: CheckTableSelect, Found: "not granted to " + user,
				Fix: "GRANT SELECT ON " + q + " TO " + user + "; (outboxd reads the outbox table's columns; or grant SELECT on " + sqlident.Quote(schema) + ".*)",
			}}, nil
		}
		return []Problem{{
			Setting: "table " + schema + "." + table, Check: CheckTableExists,
			Found: "missing or not visible to " + user + " (the server answers " + me.Message + ", which it also says for a table that does not exist)",
			Fix: "check the table name first (" + nameField + "; " + seen + "); if the table exists, GRANT SELECT ON " + q + " TO " + user +
				"; (or on " + sqlident.Quote(schema) + ".*; a GRANT on a table that does not exist fails)",
		}}, nil
	}
	return nil, fmt.Errorf("check outbox table %s.%s: %w", schema, table, err)
}

// checkTableNameCase reports a table the server names in another letter case than the config.
// With lower_case_table_names=1 (or 2) the server finds `Shop`.`Outbox` for shop.outbox, but
// the binlog's TABLE_MAP carries the name as the server stores it, which outboxd matches
// exactly: every row would be ignored and the checkpoint would move past it.
func checkTableNameCase(ctx context.Context, db *sql.DB, schema, table, nameField string) ([]Problem, error) {
	var storedSchema, storedTable string
	err := db.QueryRowContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		schema, table).Scan(&storedSchema, &storedTable)
	if errors.Is(err, sql.ErrNoRows) || err == nil && storedSchema == schema && storedTable == table {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check the name of outbox table %s.%s: %w", schema, table, err)
	}
	return []Problem{{
		Setting: "table " + schema + "." + table, Check: CheckTableExists,
		Found: "named " + sqlident.Table(storedSchema, storedTable) + " on the server (lower_case_table_names), and the binlog carries that name, so outboxd would match none of its rows",
		Fix:   "write the schema and table in the outboxd config (" + nameField + ") exactly as the server names them: " + storedSchema + "." + storedTable,
	}}, nil
}

// visibleTables lists up to 20 tables of schema the account can see, sorted.
func visibleTables(ctx context.Context, db *sql.DB, schema string) ([]string, error) {
	rows, err := db.QueryContext(ctx,
		"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME LIMIT 20", schema)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", schema, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list the tables of %s: %w", schema, err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", schema, err)
	}
	return out, nil
}

// checkColumns reports each configured column the table lacks. Names compare case-insensitively,
// as MySQL and MariaDB (and the binlog reader) do.
func checkColumns(ctx context.Context, db *sql.DB, schema, table string, t Table) ([]Problem, error) {
	if len(t.Columns) == 0 {
		return nil, nil
	}
	have, err := (&server.ColumnReader{DB: db}).Columns(ctx, schema, table)
	if err != nil {
		return nil, err
	}
	return MissingColumns(schema, table, t, have), nil
}

// MissingColumns returns a problem (a warning for an optional one) for each column of t that
// have lacks, with the ALTER TABLE and the config key as the two ways to fix it. Pure.
func MissingColumns(schema, table string, t Table, have []string) []Problem {
	q := sqlident.Table(schema, table)
	field := t.Field
	if field == "" {
		field = "tables[]"
	}
	var ps []Problem
	for _, c := range t.Columns {
		if slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, c.Name) }) {
			continue
		}
		key := field + ".columns." + c.Role
		if strings.HasPrefix(c.Role, "extra_headers.") { // a map key of the table, not of columns
			key = field + "." + c.Role
		}
		p := Problem{
			Setting: "column " + schema + "." + table + "." + c.Name, Check: CheckTableColumns,
			Found: "missing (configured as " + key + "; the table has " + strings.Join(have, ", ") + ")",
			Fix:   "ALTER TABLE " + q + " ADD COLUMN " + sqlident.Quote(c.Name) + " " + c.Type + "; or set " + key + " to the column that holds the " + c.Role,
		}
		if c.Role == "created_at" {
			p.Fix += " (reconcile selects rows by it)"
		} else if c.Required {
			p.Fix += " (every row without it is poison)"
		} else {
			p.Warning = true
			p.Fix += " (until then rows carry no " + c.Role + ")"
		}
		ps = append(ps, p)
	}
	return ps
}
