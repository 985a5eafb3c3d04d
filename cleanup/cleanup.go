// Package cleanup deletes delivered rows from the outbox tables, on the writable primary, in
// small batches, each its own short transaction, never faster than the configured rate. It
// never deletes a row of a transaction the saved checkpoint does not cover, nor a
// dead-lettered row. Delivery never depends on it: the binlog carries every row.
//
// Two ways a row goes:
//   - By key (retention 0): the pipeline hands over the primary key of every row a broker
//     acknowledged (read from the binlog, whatever the key's columns), and the key is deleted
//     once a saved checkpoint covers its transaction. Keys wait in a bounded queue per table;
//     when it is full, further keys are dropped (counted) and their rows left to the sweep. A
//     restart loses the queue the same way: the rows of keys not yet deleted stay for the sweep.
//   - By the created_at sweep (every interval, for tables with columns.created_at, whatever the
//     retention): see cutoff for the rule. Dead-lettered rows are recorded in the hold table
//     before the checkpoint can pass them (Hold), and the sweep skips every held row.
//
// Cleanup is a leader's duty: the daemon runs it only while leading, and with outboxd stopped
// nothing is deleted.
package cleanup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/wait"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
)

// DefaultQueueKeys is the capacity of one table's key queue: at about 100 bytes a key, some
// 5 MB per table when full.
const DefaultQueueKeys = 50_000

// DefaultQueueBytes bounds one table's key queue in memory, for keys of a wide primary key
// (50,000 keys of a VARCHAR(3072) would be 150 MB).
const DefaultQueueBytes = 8 << 20

// Table is one outbox table to clean.
type Table struct {
	Schema, Name string
	Settings     config.CleanupSettings
	// PK names the primary key's columns in key order (information_schema), EventID the
	// event_id column.
	PK      []string
	EventID string
	// CreatedAtDatetime is set when created_at is a DATETIME: wall-clock time of
	// Settings.TimeZone, which the sweep converts its bounds to (a TIMESTAMP is an instant and
	// needs nothing).
	CreatedAtDatetime bool
}

// Config is what a Cleaner needs. DB is the writable primary.
type Config struct {
	DB     *sql.DB
	Tables []Table
	// Checkpoint returns the commit time of the newest transaction the saved checkpoint
	// covers; ok is false before there is one.
	Checkpoint func() (commit time.Time, ok bool)
	// QueueKeys is each table's key capacity; 0 means DefaultQueueKeys.
	QueueKeys int
	Metrics   *metrics.Metrics
	Logger    zerolog.Logger
	// Now is the clock of the rate limit; nil means time.Now.
	Now func() time.Time
	// Writer verifies, before each round that writes, that DB is still a writable primary
	// (writer.go): a *NotPrimary stops cleanup, another error skips the round. nil: no check.
	Writer func(ctx context.Context) error
}

// Cleaner deletes delivered rows. Create with New; Session gives each pipeline its hook; Run
// does the deleting while the process leads. Safe for concurrent use.
type Cleaner struct {
	cfg    Config
	tables []*table
	byName map[tableRef]*table
	cur    atomic.Pointer[session]
	wake   chan struct{}
	// gen counts sessions: the sweep reads the hold table's marker again for each (since.go,
	// ensureBegun). beginMu orders a session's start against a loop storing since.
	gen     atomic.Uint64
	beginMu sync.Mutex
	stopped atomic.Pointer[NotPrimary] // set once the writer is no primary (writer.go)
}

type tableRef struct{ schema, name string }

type table struct {
	Table
	label string // schema.table
	q     queue
	stmts statements
	// since is where the hold table's record of dead letters begins (unix seconds, since.go);
	// nil while unknown: the sweep does not run.
	since atomic.Pointer[float64]
	// beginning serializes reading the marker (ensureBegun); begun is the session generation
	// since was read for, under the Cleaner's beginMu.
	beginning sync.Mutex
	begun     uint64
}

// New returns a Cleaner for cfg. It does no I/O.
func New(cfg Config) (*Cleaner, error) {
	if cfg.DB == nil {
		return nil, errors.New("cleanup: DB is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.QueueKeys <= 0 {
		cfg.QueueKeys = DefaultQueueKeys
	}
	c := &Cleaner{cfg: cfg, byName: map[tableRef]*table{}, wake: make(chan struct{}, 1)}
	for _, t := range cfg.Tables {
		if len(t.PK) == 0 {
			return nil, fmt.Errorf("cleanup: table %s.%s has no primary key", t.Schema, t.Name)
		}
		tb := &table{Table: t, label: t.Schema + "." + t.Name, q: queue{cap: cfg.QueueKeys, maxBytes: DefaultQueueBytes}}
		tb.stmts = newStatements(t)
		c.tables = append(c.tables, tb)
		c.byName[tableRef{t.Schema, t.Name}] = tb
		cfg.Metrics.DeclareCleanupTable(tb.label)
	}
	return c, nil
}

// Session returns the hook for one pipeline (pipeline.Config.Cleanup); the previous session
// ends: its keys that no save of it covered are dropped, since the next pipeline reads those
// rows again.
//
// It also forgets every table's since until the marker is read again (ensureBegun): a new session
// follows a reconnect, maybe to a new primary behind the writer address that lacks the newest
// hold-table rows (asynchronous replication), and certifying that session's saves, or
// sweeping, on what was read from the old primary could take a dead-lettered row whose hold row
// was lost.
func (c *Cleaner) Session() pipeline.Cleanup {
	s := &session{c: c}
	c.beginMu.Lock()
	c.gen.Add(1)
	for _, t := range c.tables {
		t.since.Store(nil)
	}
	c.beginMu.Unlock()
	if old := c.cur.Swap(s); old != nil {
		old.ended.Store(true)
	}
	return s
}

// session is pipeline.Cleanup for one pipeline.
type session struct {
	c     *Cleaner
	saved atomic.Uint64 // transactions the last save covered
	ended atomic.Bool
}

// Delivered queues the keys of rows whose table deletes by key (retention 0). It copies what
// it keeps and takes one lock per table per call.
func (s *session) Delivered(rows []pipeline.Row) {
	var cur *table
	var ks []key
	flush := func() {
		if cur != nil && len(ks) > 0 {
			cur.q.push(ks)
		}
		ks = nil
	}
	for i := range rows {
		ev := rows[i].Event
		if ev.PK == nil {
			continue // not a key table, or no key in the TABLE_MAP (MINIMAL metadata)
		}
		t := cur
		if t == nil || t.Schema != ev.Schema || t.Name != ev.Table {
			flush()
			t = s.c.byName[tableRef{ev.Schema, ev.Table}]
			cur = t
		}
		if t == nil || t.Settings.Retention != 0 || len(ev.PK) != len(t.PK) {
			continue
		}
		vals := make([]any, len(ev.PK))
		for j, v := range ev.PK {
			vals[j] = ownValue(v)
		}
		ks = append(ks, key{sess: s, seq: rows[i].Seq, vals: vals, eventID: string(ev.EventID.Bytes)})
	}
	flush()
}

// Saving certifies in the hold table that the dead letters up to commit are held (since.go).
func (s *session) Saving(commit time.Time) {
	if !s.ended.Load() && s.c.stopped.Load() == nil {
		s.c.certify(commit)
	}
}

// Saved records how far the newest save reaches and wakes the loops.
func (s *session) Saved(n uint64) {
	s.saved.Store(n)
	select {
	case s.c.wake <- struct{}{}:
	default:
	}
}

// holdRetry bounds the backoff of a failing hold write.
const holdRetry = 5 * time.Second

// Hold records dead-lettered rows of swept tables in the hold table before the pipeline
// acknowledges them, retrying with backoff until it succeeds or ctx ends.
func (s *session) Hold(ctx context.Context, rows []pipeline.Row) error {
	backoff := 100 * time.Millisecond
	for {
		err := s.c.hold(ctx, rows)
		if err == nil {
			return nil
		}
		s.c.cfg.Logger.Error().Err(err).Stringer("retry_in", backoff).
			Msg("cleanup: dead-lettered rows not recorded in the hold table; their acknowledgement waits (check cleanup.hold_table and its grants)")
		if !wait.Sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, holdRetry)
	}
}

func (c *Cleaner) hold(ctx context.Context, rows []pipeline.Row) error {
	var args []any
	n := 0
	var ht string
	for _, r := range rows {
		t := c.byName[tableRef{r.Event.Schema, r.Event.Table}]
		if t == nil || !t.Settings.Sweeps() || r.Event.EventID.Null || r.Event.EventID.Missing {
			continue // the sweep never takes a row without an event_id (such a row is poison)
		}
		if string(r.Event.EventID.Bytes) == markerEventID {
			// (tbl, '') is the marker's key: written before the marker, this row would be read
			// as it (its row id as since). The marker, there whenever the sweep runs, holds it.
			continue
		}
		ht = t.Settings.HoldTable
		args = append(args, t.label, r.Event.EventID.Bytes, r.Event.ID, r.GTID)
		n++
	}
	if n == 0 {
		return nil
	}
	if err := c.holdable(ctx); err != nil {
		return err
	}
	q := "INSERT IGNORE INTO " + quoteTable(ht) + " (tbl, event_id, row_id, gtid, held_at) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, NOW(6)), ", n), ", ")
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.cfg.DB.ExecContext(hctx, q, args...); err != nil {
		return fmt.Errorf("record %d dead-lettered row(s) in %s: %w", n, ht, err)
	}
	return nil
}

// Run deletes until ctx ends: one loop per table. Failures are logged and counted, never
// returned: a row that stays is no loss. It blocks until every loop has returned.
func (c *Cleaner) Run(ctx context.Context) {
	for _, t := range c.tables {
		c.beginMu.Lock()
		t.since.Store(nil)
		t.begun = 0 // no session is generation 0: the marker is read again for the next
		c.beginMu.Unlock()
	}
	var wg sync.WaitGroup
	wakes := make([]chan struct{}, len(c.tables))
	for i, t := range c.tables {
		wakes[i] = make(chan struct{}, 1)
		wg.Go(func() { c.loop(ctx, t, wakes[i]) })
	}
	wg.Go(func() { // fan the save notifications out to every table's loop
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.wake:
			}
			for _, w := range wakes {
				select {
				case w <- struct{}{}:
				default:
				}
			}
		}
	})
	wg.Wait()
}

// keyPoll is how often the key path looks at its queue besides the save notifications.
const keyPoll = time.Second

func (c *Cleaner) loop(ctx context.Context, t *table, wake <-chan struct{}) {
	log := c.cfg.Logger.With().Str("table", t.label).Logger()
	lim := &limiter{perSecond: t.Settings.MaxRowsPerSecond, now: c.cfg.Now, sleep: wait.Sleep}
	var lastSweep time.Time
	var failingSince, lastLog time.Time
	report := func(err error) {
		if err == nil || ctx.Err() != nil {
			if err == nil && !failingSince.IsZero() {
				log.Info().Str("failing_since", logging.Time(failingSince)).Msg("cleanup deletes again")
				failingSince, lastLog = time.Time{}, time.Time{}
			}
			return
		}
		c.cfg.Metrics.CleanupFailed(t.label)
		now := time.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		if now.Sub(lastLog) >= time.Minute {
			lastLog = now
			log.Warn().Err(err).Str("failing_since", logging.Time(failingSince)).Msg("cleanup statement failed; retried at the next round (rows only stay longer)")
		}
	}
	poll := time.NewTicker(keyPoll)
	defer poll.Stop()
	for ctx.Err() == nil {
		if n := t.q.dropped.Swap(0); n > 0 {
			c.cfg.Metrics.CleanupDropped(t.label, int(n))
			log.Warn().Int64("keys", n).Int("queue", c.cfg.QueueKeys).
				Msg("cleanup: key queue full, delivered rows left to the created_at sweep (or in the table without columns.created_at)")
		}
		if t.Settings.Retention == 0 {
			report(c.deleteKeys(ctx, t, lim))
		}
		if t.Settings.Sweeps() && time.Since(lastSweep) >= t.Settings.Interval && c.roundWrites(ctx, report) {
			lastSweep = time.Now()
			c.ensureBegun(ctx, t, true)
			report(c.sweep(ctx, t, lim))
			report(c.sampleOldest(ctx, t))
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-poll.C:
		}
	}
}

// deleteKeys deletes every queued key a saved checkpoint covers, batch by batch.
func (c *Cleaner) deleteKeys(ctx context.Context, t *table, lim *limiter) error {
	cur := c.cur.Load()
	first := true // the writer is checked once a round, before its first DELETE
	for ctx.Err() == nil {
		ks := t.q.take(t.Settings.Batch, cur)
		if len(ks) == 0 {
			return nil
		}
		if first {
			first = false
			if ok, err := c.writable(ctx); !ok {
				if err != nil {
					t.q.push(ks) // tried again next round
				}
				return err
			}
		}
		if !lim.wait(ctx, len(ks)) {
			return nil
		}
		q, args := t.stmts.deleteKeys(ks)
		dctx, cancel := context.WithTimeout(ctx, statementTimeout)
		res, err := c.cfg.DB.ExecContext(dctx, q, args...)
		cancel()
		if err != nil {
			t.q.push(ks) // tried again next round
			return fmt.Errorf("delete %d delivered row(s) by key: %w", len(ks), err)
		}
		n, _ := res.RowsAffected()
		c.cfg.Metrics.CleanupDeleted(t.label, int(n))
	}
	return nil
}

// statementTimeout bounds one cleanup statement.
const statementTimeout = 30 * time.Second

// cutoff is the sweep's rule, in unix seconds of the server's clock: a row goes when its
// created_at is older than both
//   - now minus the retention (the server's NOW, so outboxd's clock does not matter), and
//   - the saved checkpoint's commit time minus commit_margin.
//
// Why the second bound: created_at is set when the row is inserted, and neither it nor an
// auto-increment id is commit order. A transaction that inserted its row at T and commits
// later than the checkpoint's commit time C is not covered; its row is older than C only if
// it stayed open for longer than C - T, so with T < C - margin it would have had to stay open
// longer than the margin. Rows of transactions the checkpoint does not cover are therefore
// never older than the cutoff, provided no transaction stays open longer than the margin
// between inserting its outbox row and committing. Whole-second binlog times (MariaDB) are
// inside the margin; a time zone is not (hours): a TIMESTAMP is compared as the instant it is,
// a DATETIME in cleanup.time_zone, the zone it is written in (sql.go). After a restart the cutoff comes from the checkpoint on disk,
// so the rule holds from the first sweep; rows whose keys were queued before the restart are
// swept by it.
func cutoff(retention, margin time.Duration, checkpoint time.Time) (retentionSecs, ckptSecs float64) {
	return retention.Seconds(), float64(checkpoint.UnixMicro())/1e6 - margin.Seconds()
}

// sweep deletes the rows the cutoff takes, batch by batch, skipping held (dead-lettered) rows.
func (c *Cleaner) sweep(ctx context.Context, t *table, lim *limiter) error {
	ckpt, ok := c.cfg.Checkpoint()
	if !ok || ckpt.IsZero() {
		c.cfg.Logger.Debug().Str("table", t.label).Msg("cleanup sweep: no saved checkpoint with a commit time yet")
		return nil
	}
	since := t.since.Load()
	if since == nil {
		return nil
	}
	from := *since + t.Settings.CommitMargin.Seconds()
	ret, ck := cutoff(t.Settings.Retention, t.Settings.CommitMargin, ckpt)
	c.cfg.Logger.Debug().Str("table", t.label).Str("checkpoint_commit_time", logging.Time(ckpt)).Msg("cleanup sweep")
	var after []any // the last key of the previous batch: each batch continues after it
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, statementTimeout)
		ks, err := t.stmts.candidates(sctx, c.cfg.DB, ret, ck, from, after, t.Settings.Batch)
		cancel()
		if err != nil || len(ks) == 0 {
			return err
		}
		after = ks[len(ks)-1][:t.stmts.nPK]
		if !lim.wait(ctx, len(ks)) {
			return nil
		}
		q, args := t.stmts.deleteSwept(ks, ret, ck, from)
		dctx, cancel := context.WithTimeout(ctx, statementTimeout)
		res, err := c.cfg.DB.ExecContext(dctx, q, args...)
		cancel()
		if err != nil {
			return fmt.Errorf("delete %d row(s) older than the cutoff: %w", len(ks), err)
		}
		n, _ := res.RowsAffected()
		c.cfg.Metrics.CleanupDeleted(t.label, int(n))
		if len(ks) < t.Settings.Batch {
			return nil
		}
	}
	return nil
}

// sampleOldest sets the oldest-row gauge from the row first in primary-key order (a cheap
// query, where MIN(created_at) would scan the table).
func (c *Cleaner) sampleOldest(ctx context.Context, t *table) error {
	qctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	var age sql.NullFloat64
	err := c.cfg.DB.QueryRowContext(qctx, t.stmts.oldest).Scan(&age)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		c.cfg.Metrics.SetCleanupOldest(t.label, 0)
		return nil
	case err != nil:
		return fmt.Errorf("sample the oldest row: %w", err)
	}
	c.cfg.Metrics.SetCleanupOldest(t.label, time.Duration(age.Float64*float64(time.Second)))
	return nil
}
