package reconcile

import (
	"context"
	"database/sql"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// What the periodic reconcile (periodic.go) reads of the daemon and of the source server, as
// small interfaces its run logic is tested against without either.

// Host is what the periodic reconcile needs of the running daemon. Its methods must be safe
// for concurrent use and must not block.
type Host interface {
	// Leading reports whether this process leads: a standby's run would repeat the leader's
	// reads and double the alert.
	Leading() bool
	// Source is the server outboxd reads from now: its address, and its pool (nil when there
	// is no connection to it).
	Source() (addr string, db *sql.DB)
	// Checkpointed is the commit time of the saved checkpoint's last transaction; ok is false
	// when no transaction was checkpointed yet (or its commit time is not known).
	Checkpointed() (commit time.Time, ok bool)
}

// Metrics is where the periodic reconcile counts its runs (*metrics.Metrics; nil-safe there).
type Metrics interface {
	ReconcileRun(checked, missing, duplicated int)
	ReconcileNullCreatedAt(n int)
	ReconcileFailedRun()
}

// source is what a run reads on the source server: its clock, whether it is a replica, and
// a window checked against the brokers. Its methods block on the server (and the brokers).
type source interface {
	Now(ctx context.Context) (time.Time, error)
	Replicates(ctx context.Context) (bool, error)
	Check(ctx context.Context, w Window) (Report, error)
}

// dbSource is the source on a live connection, read with the daemon's broker readers.
type dbSource struct {
	db      *sql.DB
	cfg     *config.Config
	readers map[string]Reader
}

func (s dbSource) Now(ctx context.Context) (time.Time, error) { return ServerNow(ctx, s.db) }

func (s dbSource) Replicates(ctx context.Context) (bool, error) {
	return server.Replicates(ctx, s.db, s.cfg.Source.Flavor)
}

func (s dbSource) Check(ctx context.Context, w Window) (Report, error) {
	slack := s.cfg.Reconcile.Slack
	return Run(ctx, s.db, s.cfg, Options{Window: w, Before: slack, After: slack, Readers: s.readers})
}
