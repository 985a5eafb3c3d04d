package server

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/gtid"
)

// Problem is one way the server or the connecting account is not set up for outboxd.
type Problem struct {
	Setting string // the variable, privilege or object: "binlog_format", "REPLICATION SLAVE", "table app.outbox"
	Found   string // what the server has now
	Fix     string // exactly what to change: the statement to run and the my.cnf line
	// Warning marks a soft problem: outboxd runs, with a stated cost.
	Warning bool
}

func (p Problem) String() string {
	kind := "problem"
	if p.Warning {
		kind = "warning"
	}
	return fmt.Sprintf("%s: %s is %s; fix: %s", kind, p.Setting, p.Found, p.Fix)
}

// Check inspects the server's binlog settings and the current account's privileges, and reports
// everything that keeps outboxd from reading the outbox tables (each "schema.table") from the
// binlog. Hard problems come first, then warnings. It blocks on a few queries; an error means the
// server could not be inspected (and says which query failed), not that a check failed. Safe for
// concurrent use.
func Check(ctx context.Context, db *sql.DB, f gtid.Flavor, tables []string) ([]Problem, error) {
	if err := checkFlavor(f); err != nil {
		return nil, err
	}
	type tableName struct{ schema, table string }
	var names []tableName
	for _, t := range tables {
		schema, table, ok := strings.Cut(t, ".")
		if !ok || schema == "" || table == "" {
			return nil, fmt.Errorf("outbox table %q: want schema.table", t)
		}
		names = append(names, tableName{schema, table})
	}

	vars, err := globalVars(ctx, db)
	if err != nil {
		return nil, err
	}
	var ps []Problem
	ps = append(ps, checkVars(f, vars)...)

	user, err := currentUser(ctx, db)
	if err != nil {
		return nil, err
	}
	gs, err := readGrants(ctx, db, f)
	if err != nil {
		return nil, err
	}
	if !gs.hasGlobal("REPLICATION SLAVE", "REPLICATION REPLICA") {
		ps = append(ps, Problem{
			Setting: "REPLICATION SLAVE",
			Found:   "not granted to " + user + " (the binlog stream fails with a misleading ERROR 1045 Access denied)",
			Fix:     "GRANT REPLICATION SLAVE ON *.* TO " + user + ";",
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
			Setting: "REPLICATION CLIENT",
			Found:   found,
			Fix:     "GRANT REPLICATION CLIENT ON *.* TO " + user + "; (needed for SHOW BINARY LOGS and reading purged GTIDs)",
		})
	}
	for _, n := range names {
		q := quoteIdent(n.schema) + "." + quoteIdent(n.table)
		canSelect := gs.canSelect(n.schema, n.table)
		if !canSelect {
			ps = append(ps, Problem{
				Setting: "SELECT ON " + q,
				Found:   "not granted to " + user,
				Fix:     "GRANT SELECT ON " + q + " TO " + user + "; (outboxd reads the outbox table's columns; or grant SELECT on " + quoteIdent(n.schema) + ".*)",
			})
		}
		var count int
		err := db.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			n.schema, n.table).Scan(&count)
		if err != nil {
			return nil, fmt.Errorf("check outbox table %s.%s exists: %w", n.schema, n.table, err)
		}
		// information_schema hides tables the user has no privilege on: without SELECT the
		// privilege problem above is the one to fix first.
		if count == 0 && canSelect {
			ps = append(ps, Problem{
				Setting: "table " + n.schema + "." + n.table,
				Found:   "missing",
				Fix:     "create the outbox table " + q + " (or correct the table name in the outboxd config)",
			})
		}
	}
	// Hard problems first: an operator fixes those before anything else.
	out := make([]Problem, 0, len(ps))
	for _, p := range ps {
		if !p.Warning {
			out = append(out, p)
		}
	}
	for _, p := range ps {
		if p.Warning {
			out = append(out, p)
		}
	}
	return out, nil
}

var checkedVars = []string{
	"log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id",
	"gtid_mode", "enforce_gtid_consistency", "gtid_strict_mode",
}

// globalVars reads the settings Check needs. SHOW VARIABLES ... WHERE returns no row (rather than
// an error) for a variable this server version lacks.
func globalVars(ctx context.Context, db *sql.DB) (map[string]string, error) {
	in := make([]string, len(checkedVars))
	for i, v := range checkedVars {
		in[i] = quoteString(v)
	}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ("+strings.Join(in, ",")+")")
	if err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("read server variables: %w", err)
		}
		vars[strings.ToLower(k)] = strings.ToUpper(v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	return vars, nil
}

// checkVars turns server variables into problems. It is separate from Check so it can be tested
// for MySQL without a MySQL server.
func checkVars(f gtid.Flavor, vars map[string]string) []Problem {
	var ps []Problem
	persist := "SET GLOBAL %s = '%s'; and add %s = %s under [mysqld] in my.cnf so it survives a restart (connected sessions keep the old value until they reconnect)"
	if f == gtid.MySQL {
		persist = "SET PERSIST %s = '%s'; (or SET GLOBAL and add %s = %s under [mysqld] in my.cnf; connected sessions keep the old value until they reconnect)"
	}
	setting := func(name, want string) string { return fmt.Sprintf(persist, name, want, name, want) }

	if v := vars["log_bin"]; v != "ON" && v != "1" {
		ps = append(ps, Problem{
			Setting: "log_bin", Found: orUnset(v),
			Fix: "add log_bin = mysql-bin (and a unique non-zero server_id) under [mysqld] in my.cnf and restart the server; binary logging cannot be enabled at runtime",
		})
	}
	if v := vars["binlog_format"]; v != "ROW" {
		ps = append(ps, Problem{Setting: "binlog_format", Found: orUnset(v), Fix: setting("binlog_format", "ROW")})
	}
	if v, ok := vars["binlog_row_image"]; ok && v != "FULL" {
		ps = append(ps, Problem{Setting: "binlog_row_image", Found: v, Fix: setting("binlog_row_image", "FULL")})
	}
	switch v, ok := vars["binlog_row_metadata"]; {
	case !ok:
		ps = append(ps, Problem{
			Setting: "binlog_row_metadata", Found: "not supported by this server version", Warning: true,
			Fix: "upgrade to MySQL 8.0.1+ or MariaDB 10.5+ and set binlog_row_metadata = FULL; until then outboxd reads column names from information_schema, which is wrong for rows written before an ALTER TABLE on the outbox table",
		})
	case v != "FULL":
		ps = append(ps, Problem{
			Setting: "binlog_row_metadata", Found: v, Warning: true,
			Fix: setting("binlog_row_metadata", "FULL") + "; until then outboxd reads column names from information_schema, which is wrong for rows written before an ALTER TABLE on the outbox table",
		})
	}
	if v := vars["server_id"]; v == "" || v == "0" {
		ps = append(ps, Problem{Setting: "server_id", Found: orUnset(v), Fix: setting("server_id", "<a unique non-zero id>")})
	}
	switch f {
	case gtid.MySQL:
		if v := vars["gtid_mode"]; v != "ON" {
			ps = append(ps, Problem{
				Setting: "gtid_mode", Found: orUnset(v),
				Fix: "step through the modes one at a time: SET GLOBAL enforce_gtid_consistency = ON; SET GLOBAL gtid_mode = OFF_PERMISSIVE; SET GLOBAL gtid_mode = ON_PERMISSIVE; wait until SHOW STATUS LIKE 'Ongoing_anonymous_transaction_count' is 0; SET GLOBAL gtid_mode = ON; and add gtid_mode = ON and enforce_gtid_consistency = ON under [mysqld] in my.cnf",
			})
		}
		if v := vars["enforce_gtid_consistency"]; v != "ON" {
			ps = append(ps, Problem{Setting: "enforce_gtid_consistency", Found: orUnset(v), Fix: setting("enforce_gtid_consistency", "ON")})
		}
	case gtid.MariaDB:
		if v, ok := vars["gtid_strict_mode"]; ok && v != "ON" && v != "1" {
			ps = append(ps, Problem{
				Setting: "gtid_strict_mode", Found: v, Warning: true,
				Fix: setting("gtid_strict_mode", "ON") + "; without it the server accepts out-of-order GTIDs within a domain, which a GTID checkpoint can skip or replay",
			})
		}
	}
	return ps
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// currentUser returns the authenticated account as 'user'@'host', ready for a GRANT statement.
func currentUser(ctx context.Context, db *sql.DB) (string, error) {
	var cu string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&cu); err != nil {
		return "", fmt.Errorf("read CURRENT_USER(): %w", err)
	}
	i := strings.LastIndexByte(cu, '@')
	if i < 0 {
		return quoteString(cu), nil
	}
	return quoteString(cu[:i]) + "@" + quoteString(cu[i+1:]), nil
}

// readGrants returns the current account's grants including those of its active roles: MariaDB's
// plain SHOW GRANTS lists enabled roles' privileges; MySQL needs USING with CURRENT_ROLE().
func readGrants(ctx context.Context, db *sql.DB, f gtid.Flavor) (grants, error) {
	q := "SHOW GRANTS"
	if f == gtid.MySQL {
		var roles sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT CURRENT_ROLE()").Scan(&roles); err == nil &&
			roles.Valid && roles.String != "" && !strings.EqualFold(roles.String, "NONE") {
			q = "SHOW GRANTS FOR CURRENT_USER() USING " + roles.String
		}
	}
	lines, err := showGrants(ctx, db, q)
	if err != nil && q != "SHOW GRANTS" {
		lines, err = showGrants(ctx, db, "SHOW GRANTS")
	}
	if err != nil {
		return nil, fmt.Errorf("read privileges (SHOW GRANTS): %w", err)
	}
	return parseGrantLines(lines)
}

func showGrants(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

func parseGrantLines(lines []string) (grants, error) {
	var gs grants
	for _, l := range lines {
		g, ok, err := parseGrant(l)
		if err != nil {
			return nil, err
		}
		if ok {
			gs = append(gs, g)
		}
	}
	return gs, nil
}
