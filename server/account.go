package server

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/gtid"
)

// Facts about the connecting account and the server's settings, as preflight judges them.

// SettingNames are the server variables GlobalVars reads: the binlog settings outboxd needs.
var SettingNames = []string{
	"log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id",
	"gtid_mode", "enforce_gtid_consistency", "gtid_strict_mode",
}

// GlobalVars reads the global values of SettingNames, keyed by lower-case name, each value in
// upper case. SHOW VARIABLES ... WHERE returns no row (rather than an error) for a variable this
// server version lacks, so a missing key means the server has no such setting. It blocks on one
// query; an error says that query failed. Safe for concurrent use.
func GlobalVars(ctx context.Context, db *sql.DB) (map[string]string, error) {
	in := make([]string, len(SettingNames))
	for i, v := range SettingNames {
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

// CurrentUser returns the authenticated account as 'user'@'host', ready for a GRANT statement.
// It blocks on one query. Safe for concurrent use.
func CurrentUser(ctx context.Context, db *sql.DB) (string, error) {
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

// GrantLines returns the lines of SHOW GRANTS for the current account including those of its
// active roles: MariaDB's plain SHOW GRANTS lists enabled roles' privileges; MySQL needs USING
// with CURRENT_ROLE(). It blocks on up to three queries; an error means the grants could not be
// read. Safe for concurrent use.
func GrantLines(ctx context.Context, db *sql.DB, f gtid.Flavor) ([]string, error) {
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
	return lines, nil
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

// ReadOnly reports whether the server is read-only (@@read_only, which MariaDB and MySQL
// both have; a replica normally is). It blocks on one query.
func ReadOnly(ctx context.Context, db *sql.DB) (bool, error) {
	var ro int
	if err := db.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro); err != nil {
		return false, fmt.Errorf("read @@read_only: %w", err)
	}
	return ro != 0, nil
}

// CreatedAtIsDatetime reports whether table's column col is a DATETIME (wall-clock time, not an
// instant like a TIMESTAMP). It blocks on one query.
func CreatedAtIsDatetime(ctx context.Context, db *sql.DB, schema, table, col string) (bool, error) {
	var typ string
	err := db.QueryRowContext(ctx, `SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
		schema, table, col).Scan(&typ)
	if err != nil {
		return false, fmt.Errorf("read the type of %s.%s.%s: %w", schema, table, col, err)
	}
	return strings.EqualFold(typ, "datetime"), nil
}

// PrimaryKey returns the names of table's primary-key columns in key order (none: it has no
// primary key). It blocks on one query.
func PrimaryKey(ctx context.Context, db *sql.DB, schema, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}
