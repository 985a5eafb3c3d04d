package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/cleanup"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
)

// openCleaner connects to the writer and builds the Cleaner when cleanup is on (nil, nil
// otherwise), refusing, with the lines check prints, a writer check finds a problem with.
// The returned close releases the writer pool and the broker readers of the created_at sweep.
func openCleaner(ctx context.Context, cfg *config.Config, r *relay, log zerolog.Logger) (*cleanup.Cleaner, func(), error) {
	if !preflight.CleanupOn(cfg) {
		return nil, func() {}, nil
	}
	conn := server.WriterConn(cfg)
	db, err := server.OpenWithBackoff(ctx, conn, "cleanup writer", log)
	if err != nil {
		return nil, nil, fmt.Errorf("cleanup on checkpoint.writer_addr %s: %w", conn.Addr, err)
	}
	fail := func(err error) (*cleanup.Cleaner, func(), error) {
		db.Close()
		return nil, nil, err
	}
	var problems, skipped []string
	if err := server.RetryTransient(ctx, log, "cleanup writer not inspectable, retrying", func() (err error) {
		_, problems, skipped, err = preflight.InspectCleanup(ctx, db, conn.Addr, cfg)
		return err
	}); err != nil {
		return fail(err)
	}
	for _, s := range skipped {
		log.Warn().Msg(s)
	}
	if len(problems) > 0 {
		return fail(fmt.Errorf("%w: %d cleanup problem(s); fix them (outboxd check --config <file> prints the same), or turn cleanup off:\n  %s",
			preflight.ErrNotSetUp, len(problems), strings.Join(problems, "\n  ")))
	}
	var tables []cleanup.Table
	for i, t := range cfg.Tables {
		s, ok := cfg.CleanupFor(i)
		if !ok {
			continue
		}
		pk, err := server.PrimaryKey(ctx, db, t.Schema(), t.Name())
		if err != nil {
			return fail(err)
		}
		if len(pk) == 0 {
			// A table whose key check was skipped: cleanup leaves it alone.
			log.Warn().Str("table", t.Table).Msg("cleanup: the table has no primary key; nothing of it is deleted")
			continue
		}
		tab := cleanup.Table{Index: i, Schema: t.Schema(), Name: t.Name(), Settings: s, PK: pk, EventID: t.Columns.EventID}
		if s.Sweeps() {
			if tab.CreatedAtDatetime, err = server.CreatedAtIsDatetime(ctx, db, t.Schema(), t.Name(), s.CreatedAt); err != nil {
				return fail(err)
			}
			if tab.CreatedAtDatetime && s.TimeZone == "" {
				// Its check was skipped: a DATETIME compared in a guessed zone could go early.
				log.Warn().Str("table", t.Table).Msg("cleanup: created_at is a DATETIME without cleanup.time_zone; the created_at sweep leaves the table alone")
				tab.Settings.CreatedAt = ""
			}
		}
		tables = append(tables, tab)
		log.Info().Str("table", t.Table).Stringer("retention", s.Retention).Int("batch", s.Batch).
			Int("max_rows_per_second", s.MaxRowsPerSecond).Bool("created_at_sweep", s.Sweeps()).Strs("primary_key", pk).
			Msg("cleanup on: delivered rows are deleted once the saved checkpoint covers them")
	}
	var readers map[string]reconcile.Reader
	closeAll := func() {
		for _, rd := range readers {
			rd.Close()
		}
		db.Close()
	}
	if slices.ContainsFunc(tables, func(t cleanup.Table) bool { return t.Settings.Sweeps() }) {
		// The sweep's proof of delivery is the broker: it reads the candidate rows' events
		// back from their topics, as reconcile does.
		if readers, err = reconcile.OpenReaders(cfg); err != nil {
			return fail(fmt.Errorf("cleanup: the created_at sweep reads the sinks back: %w", err))
		}
	}
	cl, err := cleanup.New(cleanup.Config{
		DB: db, Tables: tables, Outbox: cfg, Readers: readers, QueueKeys: r.o.CleanupQueueKeys, Metrics: r.m, Logger: log.With().Str("component", "cleanup").Logger(),
		Writer: writerGuard(db, conn.Addr, cfg),
		Checkpoint: func() (time.Time, bool) {
			st := r.saver.state()
			return st.last.CommitTime, st.ok && !st.last.CommitTime.IsZero()
		},
	})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return cl, closeAll, nil
}

// writerGuard is cleanup.Config.Writer: the check's InspectCleanupWriter again before each
// round, as a failover may turn the writer into a replica while outboxd runs (nil when
// source.skip_checks names cleanup_writer).
func writerGuard(db *sql.DB, addr string, cfg *config.Config) func(context.Context) error {
	if slices.Contains(cfg.Source.SkipChecks, preflight.CheckCleanupWriter) {
		return nil
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p, reason, err := preflight.InspectCleanupWriter(ctx, db, cfg.Source.Flavor)
		switch {
		case err != nil:
			return err
		case p != nil:
			return &cleanup.NotPrimary{Reason: reason, Problem: preflight.CleanupLine(addr, *p)}
		}
		return nil
	}
}

// cleanupSession is the pipeline's cleanup hook for a new session (nil without cleanup).
func (r *relay) cleanupSession() pipeline.Cleanup {
	if r.cleaner == nil {
		return nil
	}
	return r.cleaner.Session()
}

// runCleanup runs the cleaner for one term as leader, until the returned stop is called (when
// the term ends): with outboxd stopped, or standing by, nothing is deleted.
func (r *relay) runCleanup(ctx context.Context) (stop func()) {
	if r.cleaner == nil {
		return func() {}
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.cleaner.Run(cctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}
