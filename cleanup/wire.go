package cleanup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
)

// Setup is what Open builds a Cleaner from: the configuration, and the writer the caller
// opened and let through its start-up checks (a writer they find a problem with is refused
// before Open, with the lines check prints).
type Setup struct {
	// Outbox is the daemon's configuration: which tables are cleaned and how, and the sinks
	// the created_at sweep reads back.
	Outbox *config.Config
	// DB is the writable primary (checkpoint.writer_addr) at Addr. Open does not close it.
	DB   *sql.DB
	Addr string
	// Checkpoint is Config.Checkpoint: the commit time the saved checkpoint covers.
	Checkpoint func() (commit time.Time, ok bool)
	// QueueKeys is Config.QueueKeys (0: DefaultQueueKeys).
	QueueKeys int
	Metrics   *metrics.Metrics
	// Logger gets one line per cleaned table (and the warnings for tables left alone); the
	// Cleaner logs as its component "cleanup".
	Logger zerolog.Logger
}

// Open builds the Cleaner for the tables s.Outbox cleans: their primary keys and created_at
// types read on s.DB, and, when a table sweeps, a reader of each sink's topics. It blocks on
// a few queries per table and on connecting the readers; an error leaves nothing open. The
// returned close releases the readers (not s.DB); call it after the Cleaner stopped.
func Open(ctx context.Context, s Setup) (*Cleaner, func(), error) {
	cfg, db, log := s.Outbox, s.DB, s.Logger
	var tables []Table
	for i, t := range cfg.Tables {
		st, ok := cfg.CleanupFor(i)
		if !ok {
			continue
		}
		pk, err := server.PrimaryKey(ctx, db, t.Schema(), t.Name())
		if err != nil {
			return nil, nil, err
		}
		if len(pk) == 0 {
			// A table whose key check was skipped: cleanup leaves it alone.
			log.Warn().Str("table", t.Table).Msg("cleanup: the table has no primary key; nothing of it is deleted")
			continue
		}
		tab := Table{Index: i, Schema: t.Schema(), Name: t.Name(), Settings: st, PK: pk, EventID: t.Columns.EventID}
		if st.Sweeps() {
			if tab.CreatedAtDatetime, err = server.CreatedAtIsDatetime(ctx, db, t.Schema(), t.Name(), st.CreatedAt); err != nil {
				return nil, nil, err
			}
			if tab.CreatedAtDatetime && st.TimeZone == "" {
				// Its check was skipped: a DATETIME compared in a guessed zone could go early.
				log.Warn().Str("table", t.Table).Msg("cleanup: created_at is a DATETIME without cleanup.time_zone; the created_at sweep leaves the table alone")
				tab.Settings.CreatedAt = ""
			}
		}
		tables = append(tables, tab)
		log.Info().Str("table", t.Table).Stringer("retention", st.Retention).Int("batch", st.Batch).
			Int("max_rows_per_second", st.MaxRowsPerSecond).Bool("created_at_sweep", st.Sweeps()).Strs("primary_key", pk).
			Msg("cleanup on: delivered rows are deleted once the saved checkpoint covers them")
	}
	var readers map[string]reconcile.Reader
	closeReaders := func() {
		for _, rd := range readers {
			rd.Close()
		}
	}
	if slices.ContainsFunc(tables, func(t Table) bool { return t.Settings.Sweeps() }) {
		// The sweep's proof of delivery is the broker: it reads the candidate rows' events
		// back from their topics, as reconcile does.
		var err error
		if readers, err = reconcile.OpenReaders(cfg); err != nil {
			return nil, nil, fmt.Errorf("cleanup: the created_at sweep reads the sinks back: %w", err)
		}
	}
	cl, err := New(Config{
		DB: db, Tables: tables, Outbox: cfg, Readers: readers, QueueKeys: s.QueueKeys, Metrics: s.Metrics, Logger: log.With().Str("component", "cleanup").Logger(),
		Writer:     writerGuard(s),
		Checkpoint: s.Checkpoint,
	})
	if err != nil {
		closeReaders()
		return nil, nil, err
	}
	return cl, closeReaders, nil
}

// writerGuard is Config.Writer: the check's InspectCleanupWriter again before each round, as a
// failover may turn the writer into a replica while outboxd runs (nil when
// source.skip_checks names cleanup_writer).
func writerGuard(s Setup) func(context.Context) error {
	if slices.Contains(s.Outbox.Source.SkipChecks, preflight.CheckCleanupWriter) {
		return nil
	}
	db, addr, flavor := s.DB, s.Addr, s.Outbox.Source.Flavor
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p, reason, err := preflight.InspectCleanupWriter(ctx, db, flavor)
		switch {
		case err != nil:
			return err
		case p != nil:
			return &NotPrimary{Reason: reason, Problem: preflight.CleanupLine(addr, *p)}
		}
		return nil
	}
}

// Start runs c (Run) for one term as leader, until the returned stop is called when the term
// ends: with outboxd stopped, or standing by, nothing is deleted. stop cancels the run and
// blocks until it returned. On a nil Cleaner (cleanup off) stop does nothing. Call stop once.
func (c *Cleaner) Start(ctx context.Context) (stop func()) {
	if c == nil {
		return func() {}
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(cctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}
