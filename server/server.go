// Package server reads facts about the source MySQL/MariaDB server over SQL: its GTID position,
// what it has purged, its settings, the account and its grants, whether it is read-only or
// replicating, and outbox table columns when the binlog carries no names. It judges none of
// them: package preflight says whether the server is set up for outboxd. It uses database/sql
// with go-sql-driver/mysql.
package server

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
)

// Conn says how to reach the source server.
type Conn struct {
	Flavor   gtid.Flavor
	Addr     string // host:port
	User     string
	Password string
	// TLS, when set, is used for the connection; nil connects in plain text.
	TLS *tls.Config
	// TLSFallback lets the connection continue in plain text when the server offers no TLS
	// (source.tls.mode preferred). UsesTLS tells which one happened.
	TLSFallback bool
}

// dialTimeout bounds connection setup; a blackholed address would otherwise hang until ctx ends.
const dialTimeout = 10 * time.Second

// Open opens a pool to the server over TCP with charset utf8mb4 and collation utf8mb4_general_ci
// (without an explicit collation MariaDB may fall back to latin1 and double-encode UTF-8), and
// blocks until a ping succeeds or ctx is done. On error no pool is left open. Safe for concurrent
// use.
func Open(ctx context.Context, c Conn) (*sql.DB, error) {
	if err := KnownFlavor(c.Flavor); err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = c.Addr
	cfg.User = c.User
	cfg.Passwd = c.Password
	cfg.Timeout = dialTimeout
	cfg.TLS = c.TLS
	cfg.AllowFallbackToPlaintext = c.TLSFallback
	if err := mysql.Charset("utf8mb4", "utf8mb4_general_ci")(cfg); err != nil {
		return nil, fmt.Errorf("%s server %s: charset: %w", c.Flavor, c.Addr, err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s server %s as %q: %w", c.Flavor, c.Addr, c.User, err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to %s server %s as %q: %w", c.Flavor, c.Addr, c.User, err)
	}
	return db, nil
}

// UsesTLS reports whether the pool's connections are encrypted (session Ssl_cipher is set), so
// the binlog connection can follow what mode preferred settled on. It blocks on one query and
// needs no privilege. Safe for concurrent use.
func UsesTLS(ctx context.Context, db *sql.DB) (bool, error) {
	var name, cipher string
	if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		return false, fmt.Errorf("read session Ssl_cipher: %w", err)
	}
	return cipher != "", nil
}

// KnownFlavor returns an error naming both flavors unless f is mysql or mariadb. Pure.
func KnownFlavor(f gtid.Flavor) error {
	if f != gtid.MySQL && f != gtid.MariaDB {
		return fmt.Errorf("unknown server flavor %q: want %q or %q", f, gtid.MySQL, gtid.MariaDB)
	}
	return nil
}

// Position returns the set of GTIDs the server has written to its binlog: MariaDB
// @@gtid_binlog_pos (not gtid_current_pos, which also counts replicated-but-unlogged GTIDs), MySQL
// @@gtid_executed. It blocks on one query. Safe for concurrent use.
func Position(ctx context.Context, db *sql.DB, f gtid.Flavor) (gtid.Set, error) {
	if err := KnownFlavor(f); err != nil {
		return gtid.Set{}, err
	}
	v := "@@GLOBAL.gtid_binlog_pos"
	if f == gtid.MySQL {
		v = "@@GLOBAL.gtid_executed"
	}
	return queryGTIDVar(ctx, db, f, v)
}

// Purged returns the GTIDs no longer in the server's binlogs: MySQL @@gtid_purged; MariaDB (which
// has no such variable) the Gtid_list event at the start of the oldest binlog file, i.e. what was
// written before it. An empty set means nothing was purged. It blocks on a few queries and needs
// REPLICATION CLIENT (BINLOG MONITOR) on MariaDB. Safe for concurrent use.
func Purged(ctx context.Context, db *sql.DB, f gtid.Flavor) (gtid.Set, error) {
	if err := KnownFlavor(f); err != nil {
		return gtid.Set{}, err
	}
	if f == gtid.MySQL {
		return queryGTIDVar(ctx, db, f, "@@GLOBAL.gtid_purged")
	}
	files, err := BinaryLogs(ctx, db)
	if err != nil {
		return gtid.Set{}, err
	}
	if len(files) == 0 {
		return gtid.Empty(f), nil
	}
	oldest := files[0]
	rows, err := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN "+quoteString(oldest)+" LIMIT 3")
	if err != nil {
		return gtid.Set{}, fmt.Errorf("read Gtid_list of oldest binlog %s: %w", oldest, err)
	}
	recs, err := ScanAll(rows)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("read Gtid_list of oldest binlog %s: %w", oldest, err)
	}
	for _, r := range recs {
		if r["Event_type"] != "Gtid_list" {
			continue
		}
		info := strings.TrimSpace(r["Info"])
		list := strings.TrimSuffix(strings.TrimPrefix(info, "["), "]")
		if len(list) == len(info) {
			return gtid.Set{}, fmt.Errorf("binlog %s: unexpected Gtid_list info %q, want [d-s-n,...]", oldest, info)
		}
		if repeatsDomain(list) {
			// Only the server knows which GTID of a domain is its position there.
			var pos sql.NullString
			if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", oldest).Scan(&pos); err != nil {
				return gtid.Set{}, fmt.Errorf("binlog %s: Gtid_list %q names a domain more than once; BINLOG_GTID_POS for its position: %w", oldest, info, err)
			}
			if !pos.Valid {
				return gtid.Set{}, fmt.Errorf("binlog %s: Gtid_list %q names a domain more than once and BINLOG_GTID_POS(%s, 4) is NULL (purged meanwhile?)",
					oldest, info, quoteString(oldest))
			}
			list = pos.String
		}
		s, err := gtid.Parse(f, strings.ReplaceAll(list, " ", ""))
		if err != nil {
			return gtid.Set{}, fmt.Errorf("binlog %s: Gtid_list %q: %w", oldest, info, err)
		}
		return s, nil
	}
	// Every MariaDB 10+ binlog starts with a Gtid_list; a file without one predates GTIDs.
	return gtid.Empty(f), nil
}

// repeatsDomain reports whether a Gtid_list's text names a domain more than once. The list holds
// the last GTID of every (domain, server_id) pair the binlog has seen, so it does after any
// failover or server_id change ("0-3-2,0-2-5,0-1-6"), in an order that does not tell which of
// them was logged last (MariaDB 10.11 listed 0-3-2, the last one, first).
func repeatsDomain(list string) bool {
	seen := map[string]bool{}
	for _, g := range strings.Split(list, ",") {
		d, _, _ := strings.Cut(strings.TrimSpace(g), "-")
		if seen[d] {
			return true
		}
		seen[d] = true
	}
	return false
}

// BinaryLogs lists the server's binlog files, oldest first (SHOW BINARY LOGS). It needs
// REPLICATION CLIENT (BINLOG MONITOR). Safe for concurrent use.
func BinaryLogs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("SHOW BINARY LOGS (needs log_bin=ON and REPLICATION CLIENT): %w", err)
	}
	recs, err := ScanAll(rows)
	if err != nil {
		return nil, fmt.Errorf("SHOW BINARY LOGS: %w", err)
	}
	files := make([]string, 0, len(recs))
	for _, r := range recs {
		files = append(files, r["Log_name"])
	}
	return files, nil
}

// BinlogStatus returns the server's current binlog file and position: SHOW BINARY LOG STATUS
// (MySQL 8.2+, the only form in 8.4) and, when the server does not know it, SHOW MASTER STATUS
// (MariaDB, older MySQL). It needs REPLICATION CLIENT. Safe for concurrent use.
func BinlogStatus(ctx context.Context, db *sql.DB) (file string, pos uint64, err error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOG STATUS")
	var me *mysql.MySQLError
	if err != nil && errors.As(err, &me) && me.Number == 1064 { // ER_PARSE_ERROR: older syntax only
		rows, err = db.QueryContext(ctx, "SHOW MASTER STATUS")
	}
	if err != nil {
		return "", 0, fmt.Errorf("binlog status: %w", err)
	}
	recs, err := ScanAll(rows)
	if err != nil {
		return "", 0, fmt.Errorf("binlog status: %w", err)
	}
	if len(recs) == 0 {
		return "", 0, errors.New("binlog status: no rows: binary logging is off (set log_bin in my.cnf and restart)")
	}
	pos, err = strconv.ParseUint(recs[0]["Position"], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("binlog status: position %q: %w", recs[0]["Position"], err)
	}
	return recs[0]["File"], pos, nil
}

func queryGTIDVar(ctx context.Context, db *sql.DB, f gtid.Flavor, v string) (gtid.Set, error) {
	var s sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT "+v).Scan(&s); err != nil {
		return gtid.Set{}, fmt.Errorf("read %s: %w", v, err)
	}
	// MySQL breaks long gtid_executed values with newlines after commas.
	txt := strings.Join(strings.Fields(s.String), "")
	set, err := gtid.Parse(f, txt)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("parse %s %q: %w", v, txt, err)
	}
	return set, nil
}

// ScanAll reads every row as column name → text (NULL as ""), for SHOW statements whose columns
// differ between versions. It closes rows.
func ScanAll(rows *sql.Rows) ([]map[string]string, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// quoteString quotes s as an SQL string literal (SHOW statements take no placeholders).
func quoteString(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// ColumnReader reads outbox table columns from information_schema, in ordinal order. It is the
// fallback when TABLE_MAP events carry no names (binlog_row_metadata=MINIMAL or NO_LOG): the
// result is the table's current definition, which differs from the binlog's when an ALTER TABLE
// came after the event, so callers re-read after a mismatch rather than cache forever. Safe for
// concurrent use.
type ColumnReader struct{ DB *sql.DB }

// Column is one column as information_schema.COLUMNS describes it (servercheck.Column, where
// config can name it without this package's MySQL client).
type Column = servercheck.Column

// Definitions returns schema.table's columns in ordinal order. It blocks on one query. It
// returns an error naming the table when the table does not exist or the user cannot see it.
func (r *ColumnReader) Definitions(ctx context.Context, schema, table string) ([]Column, error) {
	if r == nil || r.DB == nil {
		return nil, errors.New("column reader: no database")
	}
	rows, err := r.DB.QueryContext(ctx,
		"SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, "+
			"COALESCE(CHARACTER_OCTET_LENGTH, -1), COALESCE(NUMERIC_PRECISION, -1), COALESCE(NUMERIC_SCALE, -1), COALESCE(DATETIME_PRECISION, -1) "+
			"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
		schema, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &c.OctetLength, &c.Precision, &c.Scale, &c.FracDigits); err != nil {
			return nil, fmt.Errorf("read columns of %s.%s: %w", schema, table, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s.%s: %w", schema, table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("read columns of %s.%s: table not found in information_schema (missing, or the user has no privilege on it)", schema, table)
	}
	return cols, nil
}

// Columns returns schema.table's column names in ordinal order. It blocks on one query and
// fails as Definitions does.
func (r *ColumnReader) Columns(ctx context.Context, schema, table string) ([]string, error) {
	cols, err := r.Definitions(ctx, schema, table)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return names, nil
}

// Replicating reports whether the server is a replica whose replication threads run (either
// of them): one that lacks a transaction may still receive it. MySQL 8.0.22+ is asked with
// SHOW REPLICA STATUS, MariaDB and older MySQL with SHOW SLAVE STATUS (MariaDB: the default
// connection). It needs REPLICATION CLIENT (or SLAVE MONITOR) and blocks on one query.
func Replicating(ctx context.Context, db *sql.DB, f gtid.Flavor) (bool, error) {
	q, io, sqlT := "SHOW SLAVE STATUS", "Slave_IO_Running", "Slave_SQL_Running"
	if f == gtid.MySQL {
		q, io, sqlT = "SHOW REPLICA STATUS", "Replica_IO_Running", "Replica_SQL_Running"
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return false, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	all, err := ScanAll(rows)
	if err != nil {
		return false, fmt.Errorf("%s: %w", q, err)
	}
	for _, r := range all {
		if strings.EqualFold(r[io], "Yes") || strings.EqualFold(r[io], "Connecting") || strings.EqualFold(r[sqlT], "Yes") {
			return true, nil
		}
	}
	return false, nil
}
