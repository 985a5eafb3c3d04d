package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/server"
)

// row is one outbox row of the window, as the router needs it.
type row struct {
	table     string
	createdAt time.Time
	ev        binlog.Event
	// pk is the row's primary key, as the server's text (Prove only; nil otherwise).
	pk []any
}

// tableSource is the rowSource of the configured tables: their queries are built once, after
// checking each table's columns.
type tableSource struct {
	db     *sql.DB
	tables []tableQ
}

type tableQ struct {
	table   config.Table
	query   string
	missing map[string]bool
	// count counts the rows of a range under query's predicate; nulls the rows with a NULL
	// created_at, which no window holds.
	count, nulls string
	// nPK is the number of primary-key columns the query selects after created_at (Prove).
	nPK int
}

// newTableSource checks every configured table's columns (see tableQuery) and builds its query.
// It blocks on one query per table.
func newTableSource(ctx context.Context, db *sql.DB, cfg *config.Config) (*tableSource, error) {
	src := &tableSource{db: db}
	for i, t := range cfg.Tables {
		tq, err := tableQuery(ctx, db, i, t, cfg.CreatedAtTimeZone(i), nil)
		if err != nil {
			return nil, err
		}
		src.tables = append(src.tables, tq)
	}
	return src, nil
}

// read implements rowSource over every table, in one read-only transaction. Each table's
// SELECT stops with LIMIT at what is left of limit+1, so a range that holds too many rows is
// not read whole. The payload itself is not read, only whether it is NULL (which makes the row
// poison): reconcile matches by event_id.
//
// The bounds are instants (FROM_UNIXTIME(bound)), and created_at is read back as an instant
// (see createdAtTerms): a TIMESTAMP column is exact in any zone, and a DATETIME column holds
// the wall-clock time of the inserting session's time_zone (DEFAULT CURRENT_TIMESTAMP writes
// that session's zone, not the server's), so it is compared in the configured zone. A range
// query on created_at: an index on it makes each slice a range read instead of a table scan.
func (s *tableSource) read(ctx context.Context, since, until time.Time, limit int, fn func(row)) (bool, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return false, fmt.Errorf("reconcile: begin read-only transaction: %w", err)
	}
	defer tx.Rollback()
	lo, hi := sqlBounds(Window{Since: since, Until: until})
	n := 0
	for _, tq := range s.tables {
		t, missing := tq.table, tq.missing
		q := tq.query
		if limit > 0 {
			q += " LIMIT " + strconv.Itoa(limit-n+1)
		}
		rs, err := tx.QueryContext(ctx, q, lo, hi)
		if err != nil {
			return false, fmt.Errorf("reconcile: read %s: %w", t.Table, err)
		}
		for rs.Next() {
			var id, key, topic, etype, headers sql.Null[[]byte]
			var payloadNull bool
			var created string
			dst := []any{&id, &key, &topic, &payloadNull, &etype, &headers, &created}
			var pk []any
			if tq.nPK > 0 {
				pk = make([]any, tq.nPK)
				for i := range pk {
					dst = append(dst, &pk[i])
				}
			}
			if err := rs.Scan(dst...); err != nil {
				rs.Close()
				return false, fmt.Errorf("reconcile: read %s: %w", t.Table, err)
			}
			if n++; limit > 0 && n > limit {
				rs.Close()
				return true, nil
			}
			at, err := parseUnix(created)
			if err != nil {
				rs.Close()
				return false, fmt.Errorf("reconcile: read %s: created_at %q: %w", t.Table, created, err)
			}
			fn(row{table: t.Table, createdAt: at, pk: pk, ev: binlog.Event{
				Schema: t.Schema(), Table: t.Name(),
				EventID: field(id, missing["event_id"]), Key: field(key, missing["key"]),
				Topic: field(topic, missing["topic"]), EventType: field(etype, missing["event_type"]),
				Headers: field(headers, missing["headers"]),
				// The router only asks whether the payload is NULL or absent.
				Payload: binlog.Field{Null: payloadNull, Missing: missing["payload"], Bytes: []byte{}},
			}})
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return false, fmt.Errorf("reconcile: read %s: %w", t.Table, err)
		}
	}
	return false, nil
}

// tableQuery builds table i's queries after checking its columns: created_at must be
// configured and be a DATETIME or TIMESTAMP column, and a DATETIME needs zone (the table's
// cleanup.time_zone), one the server knows (a ConfigError otherwise); a configured column the
// table lacks is selected as NULL and marked missing, so the router calls the row poison as
// the relay would. The columns extra are selected after created_at (Prove: the primary key).
func tableQuery(ctx context.Context, db *sql.DB, i int, t config.Table, zone string, extra []string) (tableQ, error) {
	field := fmt.Sprintf("tables[%d].columns.created_at", i)
	if t.Columns.CreatedAt == "" {
		return tableQ{}, &ConfigError{Err: fmt.Errorf("%s is not set: reconcile selects the window's rows by the table's insert time; name its DATETIME or TIMESTAMP column (%s)", field, t.Table)}
	}
	defs, err := (&server.ColumnReader{DB: db}).Definitions(ctx, t.Schema(), t.Name())
	if err != nil {
		return tableQ{}, fmt.Errorf("reconcile: %w", err)
	}
	types := map[string]string{}
	for _, d := range defs {
		types[strings.ToLower(d.Name)] = strings.ToLower(d.DataType)
	}
	switch typ, ok := types[strings.ToLower(t.Columns.CreatedAt)]; {
	case !ok:
		return tableQ{}, &ConfigError{Err: fmt.Errorf("%s: %s has no column %q", field, t.Table, t.Columns.CreatedAt)}
	case typ != "datetime" && typ != "timestamp":
		return tableQ{}, &ConfigError{Err: fmt.Errorf("%s: column %s.%s is %s; want DATETIME or TIMESTAMP", field, t.Table, t.Columns.CreatedAt, typ)}
	case typ == "timestamp":
		zone = "" // an instant: no zone to convert from
	case zone == "":
		return tableQ{}, &ConfigError{Err: fmt.Errorf("%s: %s.%s is a DATETIME, the wall-clock time of whatever time_zone the inserting session had: %s",
			field, t.Table, t.Columns.CreatedAt, ZoneFix(i))}
	default:
		var unknown bool
		if err := db.QueryRowContext(ctx, "SELECT CONVERT_TZ('2000-01-01 00:00:00', @@session.time_zone, ?) IS NULL", zone).Scan(&unknown); err != nil {
			return tableQ{}, fmt.Errorf("reconcile: check time_zone %q: %w", zone, err)
		}
		if unknown {
			return tableQ{}, &ConfigError{Err: fmt.Errorf("cleanup.time_zone %q (%s) is unknown to the server: use an offset such as +00:00, or load the server's time zone tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb mysql)", zone, t.Table)}
		}
	}
	q, missing := selectQuery(t, types, zone, extra)
	where, _ := createdAtTerms(t.Columns.CreatedAt, zone)
	from := " FROM " + sqlident.Table(t.Schema(), t.Name())
	return tableQ{table: t, query: q, missing: missing, nPK: len(extra),
		count: "SELECT COUNT(*), " + digestSQL(t, types) + from + " WHERE " + where,
		nulls: "SELECT COUNT(*)" + from + " WHERE " + sqlident.Quote(t.Columns.CreatedAt) + " IS NULL"}, nil
}

// ZoneFix is what to set for tables[i]'s DATETIME created_at without a time zone. Pure.
func ZoneFix(i int) string {
	return fmt.Sprintf("set cleanup.time_zone (or tables[%d].cleanup.time_zone; with cleanup off too, as cleanup: {enabled: false, time_zone: ...}) "+
		"to the time_zone your application's sessions write it in (SYSTEM, an offset such as +00:00, or a zone name), or make the column a TIMESTAMP", i)
}

// createdAtTerms is the range predicate of created_at column col over two FROM_UNIXTIME
// arguments, and col as Unix seconds. With zone (a DATETIME), the bounds, instants in the
// session's zone, are converted to that zone's wall clock, as cleanup's sweep does, and the
// value back from it; without (a TIMESTAMP), none is needed. Pure.
func createdAtTerms(col, zone string) (where, unix string) {
	c := sqlident.Quote(col)
	wall := func(x string) string { return x }
	instant := c
	if zone != "" {
		tz := "'" + strings.ReplaceAll(zone, "'", "''") + "'"
		wall = func(x string) string { return "CONVERT_TZ(" + x + ", @@session.time_zone, " + tz + ")" }
		instant = "CONVERT_TZ(" + c + ", " + tz + ", @@session.time_zone)"
	}
	return c + " >= " + wall("FROM_UNIXTIME(?)") + " AND " + c + " < " + wall("FROM_UNIXTIME(?)"), "UNIX_TIMESTAMP(" + instant + ")"
}

// tally counts, per table in one read-only transaction, the rows under read's predicate for
// [since, until) and the rows with a NULL created_at. It blocks on two queries per table.
func (s *tableSource) tally(ctx context.Context, since, until time.Time) (inWindow int, digest uint32, nulls int, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("reconcile: begin read-only transaction: %w", err)
	}
	defer tx.Rollback()
	lo, hi := sqlBounds(Window{Since: since, Until: until})
	for _, tq := range s.tables {
		var n, z int
		var d uint32
		if err := tx.QueryRowContext(ctx, tq.count, lo, hi).Scan(&n, &d); err != nil {
			return 0, 0, 0, fmt.Errorf("reconcile: count %s: %w", tq.table.Table, err)
		}
		if err := tx.QueryRowContext(ctx, tq.nulls).Scan(&z); err != nil {
			return 0, 0, 0, fmt.Errorf("reconcile: count %s: %w", tq.table.Table, err)
		}
		inWindow, digest, nulls = inWindow+n, digest+d, nulls+z
	}
	return inWindow, digest, nulls, nil
}

// digestSQL is the server's side of a window's digest (rowDigest summed modulo 2^32) over
// table t's event_id column; 0 when the table lacks it. CRC32 runs over the bytes reconcile
// reads: a binary column's as they are, a text column's in the connection's utf8mb4
// (server.Open), whatever the column's own character set. Pure.
func digestSQL(t config.Table, types map[string]string) string {
	typ, ok := types[strings.ToLower(t.Columns.EventID)]
	if !ok {
		return "0"
	}
	col := sqlident.Quote(t.Columns.EventID)
	switch typ {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
	default:
		col = "CONVERT(" + col + " USING utf8mb4)"
	}
	return "COALESCE(SUM(CRC32(" + col + ")) % 4294967296, 0)"
}

// selectQuery is table t's SELECT of a created_at range, given its columns' types by lower-case
// name: only what routing needs. The event id, topic and event type (a route's topic template
// may name it) are read; the payload only as whether it is NULL, and the key not at all (only
// whether the table has it: routing never looks at its value). The headers column is read
// because a malformed one makes the row poison; it is dropped once the row is routed. Pure.
func selectQuery(t config.Table, types map[string]string, zone string, extra []string) (string, map[string]bool) {
	c := t.Columns
	missing := map[string]bool{}
	sel := func(role, name, expr string) string {
		if _, ok := types[strings.ToLower(name)]; !ok {
			missing[role] = true
			if role == "payload" {
				return "TRUE"
			}
			return "NULL"
		}
		return strings.ReplaceAll(expr, "?", sqlident.Quote(name))
	}
	where, unix := createdAtTerms(c.CreatedAt, zone)
	cols := []string{
		sel("event_id", c.EventID, "?"), sel("key", c.Key, "NULL"), sel("topic", c.Topic, "?"),
		sel("payload", c.Payload, "? IS NULL"), sel("event_type", c.EventType, "?"), sel("headers", c.Headers, "?"),
		unix,
	}
	for _, x := range extra {
		cols = append(cols, sqlident.Quote(x))
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + sqlident.Table(t.Schema(), t.Name()) + " WHERE " + where
	return q, missing
}

func field(v sql.Null[[]byte], missing bool) binlog.Field {
	if missing {
		return binlog.Field{Missing: true}
	}
	if !v.Valid {
		return binlog.Field{Null: true}
	}
	if v.V == nil {
		v.V = []byte{}
	}
	return binlog.Field{Bytes: v.V}
}

// FROM_UNIXTIME takes Unix seconds in [0, 2^31-1] on MariaDB 10.11 and MySQL 8.0 (a wider
// range only on newer servers) and returns NULL outside, which would compare as false for
// every row: a window such as 1960 .. 2100 ("everything") would check nothing and report
// nothing missing. No TIMESTAMP lies outside that range, nor any DATETIME an outbox row is
// created with, so the bounds are clamped to it.
var (
	minSQLTime = time.Unix(0, 0)
	maxSQLTime = time.Unix(1<<31-1, 999999e3)
)

// sqlBounds is w's bounds as FROM_UNIXTIME arguments, clamped to the range it takes. Pure.
func sqlBounds(w Window) (since, until string) {
	clamp := func(t time.Time) time.Time {
		if t.Before(minSQLTime) {
			return minSQLTime
		}
		if t.After(maxSQLTime) {
			return maxSQLTime
		}
		return t
	}
	return unixText(clamp(w.Since)), unixText(clamp(w.Until))
}

// unixText is t as decimal Unix seconds with microseconds, for FROM_UNIXTIME.
func unixText(t time.Time) string {
	us := t.UnixMicro()
	sign := ""
	if us < 0 {
		sign, us = "-", -us
	}
	return fmt.Sprintf("%s%d.%06d", sign, us/1e6, us%1e6)
}

// parseUnix reads UNIX_TIMESTAMP's decimal text.
func parseUnix(s string) (time.Time, error) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var us int64
	if frac != "" {
		frac = (frac + "000000")[:6]
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.UnixMicro(sec*1e6 + us).UTC(), nil
}
