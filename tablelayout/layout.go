// Package tablelayout is the outbox tables' column layouts: read from the server, recorded
// with each checkpoint, compared at start. Without binlog_row_metadata=FULL the binlog's rows
// carry no column names, so outboxd maps them by position onto the layout it reads from
// information_schema; a layout that changed since the checkpoint would map rows written
// before the change onto the wrong columns, and Check refuses to start from it.
package tablelayout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// ErrChanged: an outbox table's column layout differs from the one the checkpoint was
// saved under, and the binlog has no column names (binlog_row_metadata is not FULL), so rows
// written before the change would be mapped onto the wrong columns. Starting needs the
// operator (`outboxd checkpoint set --accept-layout`).
var ErrChanged = errors.New("outbox table layout changed since the checkpoint")

// Current reads every configured outbox table's layout from information_schema on db.
// It blocks on one query per table; an error names the table.
func Current(ctx context.Context, db *sql.DB, cfg *config.Config) (checkpoint.Layouts, error) {
	l := make(checkpoint.Layouts, len(cfg.Tables))
	for _, t := range cfg.Tables {
		if t.IsPattern() {
			// Its tables are known only on the server; config requires binlog_row_metadata=FULL
			// with pattern entries, so their rows carry their own column names.
			continue
		}
		cols, err := (&server.ColumnReader{DB: db}).Definitions(ctx, t.Schema(), t.Name())
		if err != nil {
			return nil, fmt.Errorf("read the layout of outbox table %s: %w", t.Table, err)
		}
		l[t.Table] = layoutOf(cols)
	}
	return l, nil
}

func layoutOf(cols []binlog.Column) []checkpoint.LayoutColumn {
	l := make([]checkpoint.LayoutColumn, len(cols))
	for i, c := range cols {
		l[i] = checkpoint.LayoutColumn{Name: c.Name, Type: c.ColumnType}
	}
	return l
}

// rowMetadataFull reports whether the server logs column names in every TABLE_MAP
// (binlog_row_metadata=FULL). A server without the variable (MySQL before 8.0.1, MariaDB before
// 10.5) never does.
func rowMetadataFull(ctx context.Context, db *sql.DB) (bool, error) {
	var v string
	err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_row_metadata").Scan(&v)
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) && me.Number == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read @@binlog_row_metadata: %w", err)
	}
	return strings.EqualFold(v, "FULL"), nil
}

// layoutChanges compares the layouts recorded with a checkpoint with the tables' layouts now,
// for the configured tables, and returns one line per changed table ("table t: what changed")
// and the tables the checkpoint has no layout for. Pure.
func layoutChanges(recorded, now checkpoint.Layouts) (changed, unrecorded []string) {
	tables := make([]string, 0, len(now))
	for t := range now {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		was, ok := recorded[t]
		if !ok {
			unrecorded = append(unrecorded, t)
			continue
		}
		if d := checkpoint.LayoutDiff(was, now[t]); d != "" {
			changed = append(changed, "outbox table "+t+": "+d)
		}
	}
	return changed, unrecorded
}

// layoutError is the refusal to start from pos with changed tables.
func layoutError(cfg *config.Config, pos string, changed []string) error {
	return fmt.Errorf("%w: %s. With binlog_row_metadata other than FULL the binlog rows carry no column names, so outboxd maps them by position "+
		"onto the layout it reads from information_schema now: rows written between the checkpoint (%s in %s) and the change would land in the wrong columns "+
		"(such as an event id sent as the key), and outboxd cannot tell from the binlog whether there are any, so it did not start. "+
		"If no rows were written to the table between the checkpoint and the ALTER TABLE, or after you relayed them with the old layout "+
		"(undo the ALTER, run outboxd until they are delivered, stop it, redo the ALTER), record the current layout with "+
		"`outboxd checkpoint set --accept-layout` and start again. Set binlog_row_metadata=FULL to have the binlog carry the names instead",
		ErrChanged, strings.Join(changed, "; "), orNone(pos), cfg.Checkpoint.Where())
}

func orNone(pos string) string {
	if pos == "" {
		return "an empty GTID set"
	}
	return "gtid_set " + pos
}

// Check compares recorded, the layouts of the position outboxd is about to stream from,
// with the tables' layouts on db now, and returns the current ones. When the server logs
// column names (FULL) nothing is compared; a nil recorded (a checkpoint of an older outboxd or
// of `checkpoint set`) or a table it lacks is logged as not checked, once. It blocks on a few
// queries. A changed layout is an error wrapping ErrChanged that says what the operator can
// do; other errors are the server's (it could not be read).
func Check(ctx context.Context, db *sql.DB, cfg *config.Config, recorded checkpoint.Layouts, pos string, log zerolog.Logger) (checkpoint.Layouts, error) {
	now, err := Current(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	full, err := rowMetadataFull(ctx, db)
	if err != nil || full {
		return now, err
	}
	changed, unrecorded := layoutChanges(recorded, now)
	if len(changed) > 0 {
		return nil, layoutError(cfg, pos, changed)
	}
	if len(unrecorded) > 0 {
		log.Warn().Strs("tables", unrecorded).Str("gtid_set", pos).
			Msg("the checkpoint records no column layout for these outbox tables (saved by an older outboxd or by checkpoint set): " +
				"a change of their columns before this start cannot be detected this once; their current layout is recorded with the next save")
	}
	return now, nil
}

// Log is the outbox tables' layouts along the stream: base at the newest position saved
// (or streamed from), then the changes the reader saw in DDL transactions not yet covered. A
// save records the layouts as of the position it saves. Changes are placed by their binlog
// coordinates, which the checkpoint carries too: a MariaDB GTID position cannot tell whether
// it covers a transaction (gtid.Set.ContainsGTID), while within one session's stream (reset
// starts each) a later end position is a later transaction. Safe for concurrent use: the
// reader appends while the saver reads. The zero value is ready: its layouts are nil (not
// recorded) until the first Reset.
type Log struct {
	mu      sync.Mutex
	base    checkpoint.Layouts
	pending []layoutChange // in binlog order
}

type layoutChange struct {
	file    string
	pos     uint32
	layouts map[binlog.TableRef][]binlog.Column
}

// LayoutChanged records the layouts after the DDL transaction t (binlog.LayoutRecorder).
func (l *Log) LayoutChanged(t *binlog.Txn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, layoutChange{file: t.File, pos: t.Pos, layouts: t.Layouts})
}

// Reset makes base the layouts at the start of a session; the changes seen before are
// dropped (the stream reads them again). It does not block beyond the log's lock.
func (l *Log) Reset(base checkpoint.Layouts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base, l.pending = base, nil
}

// At returns the layouts as of the checkpoint c: base with every pending change at or before
// c's binlog coordinates applied (and folded into base, as saves only move forward). Nil when
// base is, or l is nil. The result is the caller's to keep (a copy). It does not block beyond
// the log's lock.
func (l *Log) At(c checkpoint.Checkpoint) checkpoint.Layouts {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.base == nil {
		return nil
	}
	n := 0
	for _, p := range l.pending {
		if c.File == "" || binlogAfter(p.file, p.pos, c.File, c.Pos) {
			break
		}
		if n == 0 {
			l.base = l.base.Clone()
		}
		for t, cols := range p.layouts {
			l.base[t.Schema+"."+t.Table] = layoutOf(cols)
		}
		n++
	}
	l.pending = l.pending[n:]
	return l.base.Clone()
}

// binlogAfter reports whether binlog coordinates (file, pos) come after (cfile, cpos) on one
// server. The files share a base name and a numeric suffix that grows a digit past 999999, so
// a longer name is a later file. Pure.
func binlogAfter(file string, pos uint32, cfile string, cpos uint32) bool {
	if len(file) != len(cfile) {
		return len(file) > len(cfile)
	}
	if file != cfile {
		return file > cfile
	}
	return pos > cpos
}
