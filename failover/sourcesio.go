package failover

// Sources' seams: what it is given, and the I/O it does, which the unit tests replace.

import (
	"context"
	"database/sql"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/startpos"
)

// SourcesConfig is what Sources is made of. The start-up checks and the binlog reader are the
// caller's (the composition root wires them), so this package reads facts and decides, and
// does not own what a reader or a check is.
type SourcesConfig struct {
	Config *config.Config
	Log    zerolog.Logger
	// Metrics counts the transactions the database lost (GaveUp, LostBehind); nil-safe.
	Metrics *metrics.Metrics
	// Check runs the start-up checks on a candidate's pool; cfg is the config at the candidate.
	// Its error wraps Ineligible when the server answered and fails them; any other error is a
	// failure to ask (the candidate counts as away).
	Check      func(ctx context.Context, db *sql.DB, cfg *config.Config) error
	Ineligible error
	// NewReader makes a candidate's binlog reader, with db for the table columns; cfg is the
	// config at the candidate.
	NewReader func(ctx context.Context, cfg *config.Config, db *sql.DB) (*binlog.Reader, error)
}

// history is what Pick and LostBehind ask of a candidate's history over its pool.
type history interface {
	startpos.Server
	// Replicating reports whether the server is a running replica (server.Replicating).
	Replicating(ctx context.Context, f gtid.Flavor) (bool, error)
}

// sqlHistory is the history behind a pool.
func sqlHistory(db *sql.DB) history { return poolHistory{startpos.SQL{DB: db}} }

type poolHistory struct{ startpos.SQL }

func (h poolHistory) Replicating(ctx context.Context, f gtid.Flavor) (bool, error) {
	return server.Replicating(ctx, h.DB, f)
}

// dialSource opens the pool of the source cfg names (one attempt).
func dialSource(ctx context.Context, cfg *config.Config) (*sql.DB, error) {
	return server.Open(ctx, server.SourceConn(cfg))
}
