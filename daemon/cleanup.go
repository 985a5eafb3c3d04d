package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/cleanup"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/preflight"
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
	cl, closeReaders, err := cleanup.Open(ctx, cleanup.Setup{
		Outbox: cfg, DB: db, Addr: conn.Addr, QueueKeys: r.o.CleanupQueueKeys, Metrics: r.m, Logger: log,
		Checkpoint: func() (time.Time, bool) {
			st := r.saver.state()
			return st.Last.CommitTime, st.OK && !st.Last.CommitTime.IsZero()
		},
	})
	if err != nil {
		return fail(err)
	}
	return cl, func() {
		closeReaders()
		db.Close()
	}, nil
}
