// Package backfill delivers the rows already in an outbox table that the binlog will not deliver
// again (rows from before outboxd, a polling relay's PENDING rows): it reads them at one
// consistent snapshot, in primary-key order, sends them through the same router, pipeline and
// sinks as the binlog path (same mapping, same on_poison, broker acknowledgements, retries), and
// returns the GTID position of that snapshot, which the caller saves as the checkpoint so that
// outboxd run continues with exactly the transactions the snapshot did not see.
package backfill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink"
)

// DefaultBatchRows is how many rows one page of the read holds (Config.BatchRows).
const DefaultBatchRows = 1000

// Config is what Run needs. Cfg, DB, Tables and (unless DryRun) Sinks are required.
type Config struct {
	Cfg *config.Config
	// DB reaches the writable primary (the rows must be read where they are committed).
	DB *sql.DB
	// Sinks are the configured sinks, opened; Run does not close them.
	Sinks map[string]sink.Sink
	// Tables are "schema.table" names of configured outbox tables, read in this order.
	Tables []string
	// Where is an SQL condition on the table's columns selecting the rows to send ("status =
	// 0"); empty sends every row.
	Where string
	// BatchRows bounds one page of the read and so the memory of rows read ahead of the
	// pipeline (which bounds what is in flight by pipeline.max_inflight_*); default
	// DefaultBatchRows.
	BatchRows int
	// DryRun reads the matching rows at the snapshot, routes each as it would be sent and
	// gives it to Planned, and sends nothing.
	DryRun bool
	// Planned receives each row of a dry run in the order it would be sent; nil only counts.
	// An error it returns ends the dry run with that error.
	Planned  func(Planned) error
	Snapshot SnapshotOptions
	// DeadLetterEvents and Audit are run's --dead-letter-event (pipeline.Config): rows an
	// operator chose to dead-letter if they are poison, even under on_poison: stop.
	DeadLetterEvents map[string]bool
	Audit            func(line string) error
	Logger           zerolog.Logger
	// Metrics receives the pipeline's delivery metrics; nil records nothing.
	Metrics *metrics.Metrics
}

// Planned is one row a dry run would send: its event id, table ("schema.table") and key, and
// the sink and topic its route gives it; Poison, when not empty, says why the row could not be
// sent (Sink and Topic are then empty) and on_poison would apply to it.
type Planned struct {
	EventID, Table, Sink, Topic string
	Key                         []byte
	Poison                      string
}

// Result is what a backfill did.
type Result struct {
	Snapshot Snapshot
	// Rows counts, per table, the rows matched (DryRun) or sent and acknowledged.
	Rows map[string]int
}

// Run takes one snapshot, reads the matching rows of each table in primary-key order and,
// unless DryRun, delivers them, returning when the brokers acknowledged every one (or, under
// on_poison: dead_letter, its dead letter). It blocks until then, ctx ends or a row is poison
// under on_poison: stop. It writes nothing to the database and saves no checkpoint: that is the
// caller's step once Run returned nil, and on any error the snapshot's position must not be
// saved (some rows may not have been acknowledged; running the backfill again sends them, and
// those already sent, again). The snapshot transaction stays open while rows are sent, which
// holds back InnoDB's purge of old row versions for that time.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.BatchRows <= 0 {
		c.BatchRows = DefaultBatchRows
	}
	flavor := c.Cfg.Source.Flavor
	tables, err := resolveTables(ctx, c)
	if err != nil {
		return Result{}, err
	}
	conn, err := c.DB.Conn(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("connect for the snapshot: %w", err)
	}
	defer conn.Close()
	snap, err := OpenSnapshot(ctx, conn, flavor, c.Snapshot)
	if err != nil {
		return Result{}, fmt.Errorf("take a consistent snapshot: %w", err)
	}
	defer EndSnapshot(conn)
	res := Result{Snapshot: snap, Rows: map[string]int{}}
	c.Logger.Info().Str("gtid_set", snap.Position.String()).Str("method", snap.Method).
		Str("binlog_file", snap.File).Uint64("binlog_pos", snap.Pos).Msg("backfill snapshot taken")
	if c.DryRun {
		return res, plan(ctx, c, conn, snap, tables, res.Rows)
	}
	err = deliver(ctx, c, snap, func(ctx context.Context, send func(*binlog.Txn) error) error {
		for _, t := range tables {
			n, err := t.read(ctx, conn, c.Where, c.BatchRows, snap.At, send)
			res.Rows[t.name] = n
			if err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// plan reads the rows a backfill would send, as it would read them (keyset pages in the
// snapshot), routes each with the relay's router and hands it to c.Planned; rows counts them
// per table.
func plan(ctx context.Context, c Config, conn *sql.Conn, snap Snapshot, tables []table, rows map[string]int) error {
	rt, err := router.New(c.Cfg)
	if err != nil {
		return err
	}
	for _, t := range tables {
		n, err := t.read(ctx, conn, c.Where, c.BatchRows, snap.At, func(txn *binlog.Txn) error {
			if c.Planned == nil {
				return nil
			}
			for i := range txn.Events {
				ev := &txn.Events[i]
				p := Planned{EventID: string(ev.EventID.Bytes), Table: t.name, Key: ev.Key.Bytes}
				sinkName, msg, err := rt.Route(txn, ev)
				if err != nil {
					p.Poison = err.Error()
				} else {
					p.Sink, p.Topic = sinkName, msg.Topic
				}
				if err := c.Planned(p); err != nil {
					return err
				}
			}
			return nil
		})
		rows[t.name] = n
		if err != nil {
			return err
		}
	}
	return nil
}

// noSave is the pipeline's Saver during a backfill: its position is the snapshot's, which the
// caller saves once every row was acknowledged, never a partial one.
type noSave struct{}

func (noSave) Save(context.Context, checkpoint.Checkpoint) error { return nil }

// deliver runs a pipeline built as the relay's is (router, sinks, on_poison, retries, in-flight
// bounds) over the transactions produce sends, and returns nil only when every one was
// acknowledged.
func deliver(ctx context.Context, c Config, snap Snapshot, produce func(context.Context, func(*binlog.Txn) error) error) error {
	cfg := c.Cfg
	rt, err := router.New(cfg)
	if err != nil {
		return err
	}
	pl, err := pipeline.New(pipeline.Config{
		Router:             rt,
		Sinks:              c.Sinks,
		Saver:              noSave{},
		Start:              snap.Position,
		OnPoison:           cfg.OnPoison,
		RetryInitial:       cfg.Retry.Initial,
		RetryMax:           cfg.Retry.Max,
		MissingTopicWait:   cfg.Retry.MissingTopicTimeout,
		CheckpointInterval: time.Hour, // nothing to save (noSave)
		// An interrupted backfill saves nothing, so sends finishing after it gain nothing.
		DrainTimeout:      time.Second,
		MaxInflightEvents: cfg.Pipeline.MaxInflightEvents,
		MaxInflightBytes:  cfg.Pipeline.MaxInflightBytes,
		RouteLabels:       cfg.RouteLabels(),
		DeadLetterEvents:  c.DeadLetterEvents,
		Audit:             c.Audit,
		Logger:            c.Logger.With().Str("component", "pipeline").Logger(),
		Metrics:           c.Metrics,
	})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	txns := make(chan *binlog.Txn, 2)
	plDone := make(chan error, 1)
	go func() {
		err := pl.Run(runCtx, txns)
		cancel() // a pipeline that stopped (a poison row) takes no more: stop reading
		plDone <- err
	}()
	var sent uint64
	send := func(t *binlog.Txn) error {
		select {
		case txns <- t:
			sent++
			return nil
		case <-runCtx.Done():
			return runCtx.Err()
		}
	}
	prodErr := produce(runCtx, send)
	if prodErr != nil {
		cancel() // the pipeline drains what it has; nothing is saved anyway
	}
	close(txns)
	if plErr := <-plDone; plErr != nil {
		return plErr // the cause; the read then only saw its context end
	}
	if prodErr != nil && ctx.Err() == nil {
		return prodErr
	}
	if ctx.Err() != nil {
		return fmt.Errorf("backfill interrupted before every row was acknowledged: %w", ctx.Err())
	}
	// Run returns nil after a drain whose sends timed out too; only a count proves them all.
	if acked := pl.AckedTransactions(); acked != sent {
		return fmt.Errorf("backfill: %d of %d batches acknowledged: the checkpoint is not set; run the backfill again", acked, sent)
	}
	return nil
}

// table is one outbox table to read: its projection onto the configured columns and its primary
// key.
type table struct {
	name, schema, tbl string
	pk                []string
	// cols are the selected columns after the primary key; roles index into the selected row
	// (-1: the table lacks the column, Missing in the event, as on the binlog path).
	cols                                                 []string
	eventID, key, topic, payload, eventType, headers, id int
	// timestamp and partition are -2 when not configured; extra are the extra_headers columns
	// in config.Table.ExtraHeaderColumns' order.
	timestamp, partition int
	extra                []int
}

// resolveTables checks that each name is a configured outbox table and reads its columns and
// primary key (information_schema, on the pool: not part of the snapshot, and not needed to be).
func resolveTables(ctx context.Context, c Config) ([]table, error) {
	if len(c.Tables) == 0 {
		return nil, errors.New("backfill: no table given (--table schema.table)")
	}
	out := make([]table, 0, len(c.Tables))
	seen := map[string]bool{}
	for _, name := range c.Tables {
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("--table %s is given twice: its rows would be sent twice", name)
		}
		seen[strings.ToLower(name)] = true
		var tc *config.Table
		for i := range c.Cfg.Tables {
			if strings.EqualFold(c.Cfg.Tables[i].Table, name) {
				tc = &c.Cfg.Tables[i]
			}
		}
		if schema, tbl, ok := strings.Cut(name, "."); tc == nil && ok {
			// A table of a tables[].pattern entry: its columns are the entry's.
			if e, _, found := c.Cfg.TableFor(schema, tbl); found && e.IsPattern() {
				e.Table, e.Pattern = name, ""
				tc = &e
			}
		}
		if tc == nil {
			return nil, fmt.Errorf("--table %s is not one of the config's tables[]: backfill sends rows as the relay would, so it needs the table's columns and routes", name)
		}
		t := table{name: tc.Table, schema: tc.Schema(), tbl: tc.Name()}
		names, err := (&server.ColumnReader{DB: c.DB}).Columns(ctx, t.schema, t.tbl)
		if err != nil {
			return nil, err
		}
		if t.pk, err = primaryKey(ctx, c.DB, t.schema, t.tbl); err != nil {
			return nil, err
		}
		if err := transactional(ctx, c.DB, t.schema, t.tbl); err != nil {
			return nil, err
		}
		idx := func(col string) int {
			for _, n := range names {
				if strings.EqualFold(n, col) {
					t.cols = append(t.cols, n)
					return len(t.pk) + len(t.cols) - 1
				}
			}
			return -1
		}
		cl := tc.Columns
		t.eventID, t.key, t.topic, t.payload = idx(cl.EventID), idx(cl.Key), idx(cl.Topic), idx(cl.Payload)
		t.eventType, t.headers, t.id = idx(cl.EventType), idx(cl.Headers), idx("id")
		t.timestamp, t.partition = -2, -2
		if cl.Timestamp != "" {
			t.timestamp = idx(cl.Timestamp)
		}
		if cl.Partition != "" {
			t.partition = idx(cl.Partition)
		}
		extra, _ := tc.ExtraHeaderColumns()
		for _, c := range extra {
			t.extra = append(t.extra, idx(c))
		}
		out = append(out, t)
	}
	return out, nil
}

// primaryKey returns the table's primary key columns in key order; a table without one cannot
// be read in a stable order page by page, so it is an error.
func primaryKey(ctx context.Context, db *sql.DB, schema, tbl string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION", schema, tbl)
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s.%s: %w", schema, tbl, err)
	}
	defer rows.Close()
	var pk []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("read the primary key of %s.%s: %w", schema, tbl, err)
		}
		pk = append(pk, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the primary key of %s.%s: %w", schema, tbl, err)
	}
	if len(pk) == 0 {
		return nil, fmt.Errorf("%s.%s has no primary key: backfill reads rows in primary-key order, page by page", schema, tbl)
	}
	return pk, nil
}

// transactional fails for a table whose engine is not InnoDB: a consistent snapshot covers only
// InnoDB's rows (MyISAM has no row versions), so rows of another engine could be committed after
// the snapshot's position yet read by it, and be sent twice, or be missed.
func transactional(ctx context.Context, db *sql.DB, schema, tbl string) error {
	var engine sql.NullString
	err := db.QueryRowContext(ctx, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, tbl).Scan(&engine)
	if err != nil {
		return fmt.Errorf("read the engine of %s.%s: %w", schema, tbl, err)
	}
	if !strings.EqualFold(engine.String, "InnoDB") {
		return fmt.Errorf("%s.%s uses engine %s: backfill reads at a consistent snapshot, which only InnoDB tables have; "+
			"convert it first (ALTER TABLE %s.%s ENGINE=InnoDB)",
			schema, tbl, engine.String, schema, tbl)
	}
	return nil
}

func (t *table) from() string { return sqlident.Table(t.schema, t.tbl) }

func where(cond string) string {
	if strings.TrimSpace(cond) == "" {
		return "1=1"
	}
	return "(" + cond + ")"
}

// read sends the matching rows as transactions of up to batch events, in primary-key order:
// keyset pages (WHERE cond AND pk > last ORDER BY pk LIMIT batch, see keysetAfter), all in the one snapshot, so a
// page is never held longer than it takes to hand it on and no statement runs long. It returns
// how many rows it handed on.
func (t *table) read(ctx context.Context, conn *sql.Conn, cond string, batch int, at time.Time, send func(*binlog.Txn) error) (int, error) {
	pkList := make([]string, len(t.pk))
	for i, c := range t.pk {
		pkList[i] = sqlident.Quote(c)
	}
	sel := make([]string, 0, len(t.pk)+len(t.cols))
	sel = append(sel, pkList...)
	for _, c := range t.cols {
		sel = append(sel, sqlident.Quote(c))
	}
	head := "SELECT " + strings.Join(sel, ", ") + " FROM " + t.from() + " WHERE " + where(cond)
	tail := fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(pkList, ", "), batch)
	after := " AND (" + keysetAfter(pkList) + ")"
	var last []any
	total := 0
	for {
		q := head + tail
		if last != nil {
			q = head + after + tail
		}
		evs, lastKey, err := t.page(ctx, conn, q, keysetArgs(last))
		if err != nil {
			return total, err
		}
		if len(evs) == 0 {
			return total, nil
		}
		if err := send(&binlog.Txn{CommitTime: at, Events: evs}); err != nil {
			return total, err
		}
		total += len(evs)
		if len(evs) < batch {
			return total, nil
		}
		last = lastKey
	}
}

// keysetAfter is the condition "the primary key is after the last row's" for columns cols, as
// (c1 > ?) OR (c1 = ? AND c2 > ?) OR ..., which the server turns into a range it seeks to.
// The row constructor (c1, c2) > (?, ?) means the same, but MariaDB does not use it as a range
// (EXPLAIN: type index): every page would scan the key from the table's start, quadratic in
// the table's size. Its arguments are keysetArgs(last). Pure.
func keysetAfter(cols []string) string {
	terms := make([]string, len(cols))
	for i := range cols {
		var conj []string
		for _, c := range cols[:i] {
			conj = append(conj, c+" = ?")
		}
		terms[i] = "(" + strings.Join(append(conj, cols[i]+" > ?"), " AND ") + ")"
	}
	return strings.Join(terms, " OR ")
}

// keysetArgs is keysetAfter's arguments for the last row's key values; nil for nil. Pure.
func keysetArgs(last []any) []any {
	if last == nil {
		return nil
	}
	var args []any
	for i := range last {
		args = append(args, last[:i+1]...)
	}
	return args
}

// page runs one page's query and projects its rows onto events, as the binlog path's projection
// does (binlog.FieldOf), and returns the last row's primary key.
func (t *table) page(ctx context.Context, conn *sql.Conn, q string, args []any) ([]binlog.Event, []any, error) {
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %s: %w", t.name, q, err)
	}
	defer rows.Close()
	n := len(t.pk) + len(t.cols)
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var evs []binlog.Event
	var last []any
	for rows.Next() {
		clear(vals)
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", t.name, err)
		}
		field := func(i int) binlog.Field {
			if i < 0 {
				return binlog.Field{Missing: true}
			}
			return binlog.FieldOf(vals[i]) // database/sql copied []byte values into vals
		}
		ev := binlog.Event{
			Schema: t.schema, Table: t.tbl,
			EventID: field(t.eventID), Key: field(t.key), Topic: field(t.topic), Payload: field(t.payload),
			EventType: field(t.eventType), Headers: field(t.headers),
		}
		if f := field(t.id); !f.Missing && !f.Null {
			ev.ID = string(f.Bytes)
		}
		if t.timestamp != -2 {
			// Text as the session prints it: a TIMESTAMP column is read in the session's time
			// zone here, not as epoch millis as on the binlog path (docs/operations/backfill.md).
			ev.Timestamp = field(t.timestamp)
		}
		if t.partition != -2 {
			ev.Partition = field(t.partition)
		}
		if len(t.extra) > 0 {
			ev.Extra = make([]binlog.Field, len(t.extra))
			for k, c := range t.extra {
				ev.Extra[k] = field(c)
			}
		}
		evs = append(evs, ev)
		last = append(last[:0:0], vals[:len(t.pk)]...)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", t.name, err)
	}
	return evs, last, nil
}
