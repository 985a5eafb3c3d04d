package preflight

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/server"
)

// Problem is one way the server or the connecting account is not set up for outboxd
// (servercheck.Problem, where config can name it without this package's MySQL client).
type Problem = servercheck.Problem

// inspectTables inspects the server's binlog settings and the current account's privileges, and
// reports everything that keeps outboxd from reading the outbox tables (each "schema.table")
// from the binlog. It is Inspect without column checks or overrides; see there.
func inspectTables(ctx context.Context, db *sql.DB, f gtid.Flavor, tables []string) ([]Problem, error) {
	req := Request{Flavor: f}
	for _, t := range tables {
		req.Tables = append(req.Tables, Table{Name: t})
	}
	return Inspect(ctx, db, req)
}

// checkVars turns server variables into problems. It is separate from Inspect so it can be tested
// for MySQL without a MySQL server.
func checkVars(f gtid.Flavor, vars map[string]string, allowMinimal bool) []Problem {
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
		// Older servers cannot log names: nothing to set, so a warning (the stream watches for
		// what it can detect).
		ps = append(ps, Problem{
			Setting: "binlog_row_metadata", Found: "not supported by this server version", Warning: true,
			Fix: "upgrade to MySQL 8.0.1+ or MariaDB 10.5+ and set binlog_row_metadata = FULL; until then outboxd reads column names from information_schema, which is wrong for rows written before an ALTER TABLE on the outbox table",
		})
	case v != "FULL":
		// Without names in the binlog a row written before a column reorder is read with
		// today's order: fields land in the wrong roles without any error. Only an explicit
		// source.allow_minimal_row_metadata accepts that.
		fix := setting("binlog_row_metadata", "FULL") + "; without it outboxd reads column names from information_schema, which maps the fields of rows written before an ALTER TABLE on the outbox table to the wrong columns"
		if !allowMinimal {
			fix += " (to accept that risk instead, set source.allow_minimal_row_metadata: true)"
		}
		ps = append(ps, Problem{Setting: "binlog_row_metadata", Found: v, Warning: allowMinimal, Fix: fix})
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
	// Every variable check is named after its variable.
	for i := range ps {
		ps[i].Check = ps[i].Setting
	}
	return ps
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// account returns the connected account as 'user'@'host' and its grants including those of
// its active roles (server.GrantLines), parsed: what every privilege check needs.
func account(ctx context.Context, db *sql.DB, f gtid.Flavor) (user string, gs grants, err error) {
	if user, err = server.CurrentUser(ctx, db); err != nil {
		return "", nil, err
	}
	lines, err := server.GrantLines(ctx, db, f)
	if err != nil {
		return "", nil, err
	}
	gs, err = parseGrantLines(lines)
	return user, gs, err
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
