// Package cleanup deletes delivered rows from the outbox tables, on the writable primary, in
// small batches, each its own short transaction, never faster than the configured rate.
// Delivery never depends on it: the binlog carries every row.
//
// The rule: a row is deleted only on proof that its event was acknowledged by the broker.
// Time never proves delivery: no created_at, retention, zone or commit-time arithmetic
// justifies a delete. Dead-lettered rows are never deleted (an operator removes them).
//
// Two ways a row goes:
//   - By key (retention 0): the pipeline hands over the primary key of every row a broker
//     acknowledged (read from the binlog, whatever the key's columns; dead letters are not
//     handed over), and the key is deleted once a saved checkpoint covers its transaction.
//     Keys wait in a bounded queue per table; when it is full, further keys are dropped
//     (counted) and their rows left to the sweep. A restart loses the queue the same way.
//   - By the created_at sweep (every interval, for tables with columns.created_at, whatever the
//     retention): a reconcile of the candidate rows (package reconcile, Prove). created_at
//     older than both now minus the retention and the saved checkpoint's commit time minus
//     commit_margin only chooses the candidates; each is deleted only when its event_id is
//     found at the topic its route gives, read back from the broker. The rest stay and are
//     counted (outboxd_cleanup_unproven_rows) and logged: rows the relay never saw (written
//     with sql_log_bin=0, or before the binlog the relay started at), dead letters, and rows
//     whose messages the broker no longer holds (a retention longer than the broker's).
//
// The cost of the sweep's proof is one more read of each swept row's message from the broker,
// like one more consumer of the outbox topics over the rows' time range (reconcile's slack on
// either side), and a full pass over the table's older rows every fullPassRounds rounds (the
// rounds between look only at rows newer than the last).
//
// Cleanup is a leader's duty: the daemon runs it only while leading, and with outboxd stopped
// nothing is deleted.
package cleanup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/wait"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/reconcile"
)

// DefaultQueueKeys is the capacity of one table's key queue: at about 100 bytes a key, some
// 5 MB per table when full.
const DefaultQueueKeys = 50_000

// DefaultQueueBytes bounds one table's key queue in memory, for keys of a wide primary key
// (50,000 keys of a VARCHAR(3072) would be 150 MB).
const DefaultQueueBytes = 8 << 20

// Table is one outbox table to clean.
type Table struct {
	// Index is the table's position in the configuration's tables (what the sweep routes by).
	Index        int
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
	// Outbox is the daemon's configuration: the sweep routes each candidate row with its
	// router to find the topic to look in. Readers read each sink's topics (reconcile); the
	// Cleaner does not close them. Both are required when a table sweeps.
	Outbox  *config.Config
	Readers map[string]reconcile.Reader
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
	cfg     Config
	tables  []*table
	byName  map[tableRef]*table
	cur     atomic.Pointer[session]
	wake    chan struct{}
	stopped atomic.Pointer[NotPrimary] // set once the writer is no primary (writer.go)
}

type tableRef struct{ schema, name string }

type table struct {
	Table
	label string // schema.table
	q     queue
	stmts statements
	// sw is the sweep's progress, owned by the table's loop.
	sw sweepState
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
		if t.Settings.Sweeps() && (cfg.Outbox == nil || cfg.Readers == nil) {
			return nil, fmt.Errorf("cleanup: table %s.%s sweeps by created_at: Outbox and Readers are required", t.Schema, t.Name)
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
// rows again. On a nil Cleaner (cleanup off) it returns nil, the pipeline's "no cleanup".
func (c *Cleaner) Session() pipeline.Cleanup {
	if c == nil {
		return nil
	}
	s := &session{c: c}
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

// Saved records how far the newest save reaches and wakes the loops.
func (s *session) Saved(n uint64) {
	s.saved.Store(n)
	select {
	case s.c.wake <- struct{}{}:
	default:
	}
}

// Run deletes until ctx ends: one loop per table. Failures are logged and counted, never
// returned: a row that stays is no loss. It blocks until every loop has returned.
func (c *Cleaner) Run(ctx context.Context) {
	for _, t := range c.tables {
		t.sw = sweepState{} // each term starts with a full pass
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
			report(c.sweep(ctx, t, lim, log))
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
		// The rule: a row is deleted only on proof its event was acknowledged. These keys
		// were read from the binlog with the rows a broker acknowledged (Delivered; never a
		// dead letter), and a saved checkpoint covers their transactions (take).
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
