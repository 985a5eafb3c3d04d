// Package daemon runs the relay: it opens the checkpoint, decides where to start reading, and
// wires the binlog reader, the router, the pipeline and the sinks under one errgroup.
package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/deadletter"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/failover"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/ops"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/sink/sinks"
)

// Options are the run command's flags.
type Options struct {
	// FromGTID replays from this executed set instead of the checkpoint.
	FromGTID string
	// Force accepts a start set that lacks a source the server has.
	Force bool
	// DeadLetterEvents are event ids to dead-letter in this run even under on_poison: stop
	// (outboxd run --dead-letter-event): the operator's explicit, audited way past a poison row.
	DeadLetterEvents []string
	Logger           zerolog.Logger
	// Version is reported by /status and outboxd_build_info.
	Version string
	// Now is this process's clock (time.Now when nil); a test injects one that runs ahead of
	// the database's. The periodic reconcile takes its windows from the database's clock and
	// only compares the two, to warn of a skew.
	Now func() time.Time
	// CleanupQueueKeys is each cleaned table's key queue capacity (cleanup.Config.QueueKeys);
	// 0 means cleanup.DefaultQueueKeys. For tests: a tiny queue makes the key path drop keys
	// and leave their rows to the created_at sweep. The config has no such setting.
	CleanupQueueKeys int
	// ClockEvery is how often the leader reads the source's clock (ops.Config.ClockEvery); 0
	// means once a minute. For tests that move the database's clock.
	ClockEvery time.Duration
}

const (
	// sameIDDropLimit drops for another connection with our server_id within sameIDWindow stop
	// the daemon: with the backoff above two such replicas cut each other off every few seconds.
	sameIDDropLimit = 3
	sameIDWindow    = 2 * time.Minute
)

// Run relays until ctx ends (then it drains, saves the checkpoint and returns nil; a ctx that
// ends during start-up returns nil too) or a fatal error: a poison row under on_poison: stop,
// a checkpoint that cannot be written (for 30 s while streaming), a start position the server
// lacks, a refused login, a checkpoint row another process took over (superseded). The start
// position is saved as the checkpoint before anything streams, and every stop saves it again.
// A lost source connection is not fatal: the in-flight sends drain, the checkpoint is saved,
// and the stream restarts from the acknowledged position with backoff. With ha.enabled the
// process first stands by until it holds the leader lock, and a leader that loses the lock
// stops reading, sending and saving at once (role.go). It blocks for the life of the daemon.
// The admin server (admin.listen) and, while leading, the heartbeat row writer
// (source.heartbeat) run alongside.
func Run(ctx context.Context, cfg *config.Config, o Options) (err error) {
	log := o.Logger
	started := time.Now()
	r := &relay{cfg: cfg, o: o, log: log}
	defer func() {
		if !r.streamed.Load() {
			err = startupStopped(ctx, err, log)
		}
	}()
	if o.FromGTID != "" && cfg.HA.Enabled {
		// A standby would apply it at its first term, maybe hours later, moving the shared
		// checkpoint back then; the row is what every instance follows.
		return fmt.Errorf("--from-gtid is refused with ha.enabled: set the position every instance resumes from with "+
			"`outboxd checkpoint set --gtid %s --ignore-leader` (the running leader is superseded and restarts from it)", o.FromGTID)
	}
	if r.diverted.Events, r.audit, err = deadletter.Override(cfg, o.DeadLetterEvents, log); err != nil {
		return err
	}
	mo := metrics.Options{Version: o.Version, HeartbeatPeriod: sourceHeartbeatPeriod}
	if cfg.HA.Enabled {
		mo.LockName = cfg.HA.LockName
	}
	r.m = metrics.New(mo)
	declareSinks(r.m, cfg)
	var cp checkpoint.Storage
	if !cfg.Checkpoint.MySQL() {
		// A file opens at once, without a server: a second outboxd on it is told the file is
		// locked, not that the admin address the two share is taken.
		if cp, err = store.Open(ctx, cfg, log, nil); err != nil {
			return err
		}
		defer cp.Close()
	}
	// The operator side (admin server, position sampler, heartbeat row) lives as long as Run
	// and never decides its outcome. The admin server answers from here on, before any server
	// is reached: /readyz and /status name the step below that holds the start.
	side := ops.New(ops.Config{Config: cfg, Metrics: r.m, Started: started, Version: o.Version, Logger: log, Now: o.Now, ClockEvery: o.ClockEvery})
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	if err := side.Listen(opsCtx); err != nil {
		stopOps()
		return err
	}
	defer func() {
		stopOps()
		side.Wait()
	}()

	if cp == nil {
		side.Step("connecting to the checkpoint writer " + server.WriterConn(cfg).Addr)
		if cp, err = store.Open(ctx, cfg, log, side.Blocked); err != nil {
			return err
		}
		defer cp.Close()
	}
	if ks, ok := cp.(*kafkatxn.Store); ok {
		name := cfg.Checkpoint.Sink
		r.m.DeclareKafkaTxn(name)
		ks.Observe(func() { r.m.KafkaFenced(name) }, func(committed bool) { r.m.KafkaTxnEnded(name, committed) })
	}
	if err := checkMarkColumn(ctx, cp); err != nil {
		return err
	}

	srcAddrs := strings.Join(cfg.Source.Addrs, ", ")
	side.Step("connecting to source " + srcAddrs)
	addr, db, err := openSource(ctx, cfg, log, func(err error) {
		side.Blocked(err)
		r.m.SourceConnected(false, err)
	})
	if err != nil {
		return fmt.Errorf("connect to source %s: %w", srcAddrs, err)
	}
	r.m.SourceConnected(false, nil) // reached: the stream is not connected yet, for no error
	r.src = failover.NewSources(failover.SourcesConfig{
		Config: cfg, Log: log, Metrics: r.m,
		Check: func(ctx context.Context, db *sql.DB, at *config.Config) error {
			return preflight.Gate(ctx, db, at, log)
		},
		Ineligible: preflight.ErrNotSetUp,
		// r.saver (its layouts) is set before the first reader is made, below.
		NewReader: func(ctx context.Context, at *config.Config, db *sql.DB) (*binlog.Reader, error) {
			return newReader(ctx, at, db, r.m, r.saver.layouts, log)
		},
	})
	r.src.Adopt(addr, db)
	defer r.src.Close()
	// Before anything reads positions: log_bin off or the wrong flavor would otherwise surface
	// as a confusing GTID error.
	side.Step("checking source " + addr)
	if err := preflight.StartWaiting(ctx, db, r.src.At(addr), log); err != nil {
		if len(cfg.Source.Addrs) <= 1 || !errors.Is(err, preflight.ErrNotSetUp) {
			return err
		}
		// Another candidate may pass: the first pick checks them all, in order.
		log.Warn().Err(err).Str("source", addr).Msg("source candidate fails the start-up checks; trying the others")
	} else {
		r.verified = addr
	}

	side.Step("opening the sinks")
	opened, err := sinks.Open(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range opened {
			s.Close()
		}
	}()
	r.sinks = opened
	if r.router, err = router.New(cfg); err != nil {
		return err
	}
	r.saver = newSavedStore(ctx, cp, r.m)
	r.saver.scope = store.Scope(cfg)
	side.Step("reading the outbox tables from source " + addr)
	if _, err := r.src.Reader(ctx, addr); err != nil {
		return err
	}
	side.Step("connecting to the cleanup writer")
	cleaner, closeCleaner, err := openCleaner(ctx, cfg, r, log)
	if err != nil {
		return err
	}
	defer closeCleaner()
	r.cleaner = cleaner

	side.Step("claiming the checkpoint")
	roles, err := newRoles(ctx, cfg, r, log)
	if err != nil {
		return err
	}
	if roles != nil {
		defer roles.close()
	} else {
		epoch, err := r.claimAlone(ctx)
		if err != nil || ctx.Err() != nil {
			return err
		}
		r.role.set(roleState{Role: election.RoleLeader, Epoch: epoch, Since: time.Now(), Reason: "ha disabled"}, r.m)
	}
	running := ops.Running{Relay: opsRelay{r}, Sinks: opened, Marks: r.saver}
	if hl, ok := r.saver.store.(checkpoint.HolderLocker); ok {
		running.HolderLock = hl
	}
	side.Start(opsCtx, running)
	if roles != nil {
		return roles.Run(ctx)
	}
	return r.lead(ctx, nil)
}

// newReader is the binlog reader of the source, with db for the table columns.
func newReader(ctx context.Context, cfg *config.Config, db *sql.DB, m *metrics.Metrics, layouts binlog.LayoutRecorder, log zerolog.Logger) (*binlog.Reader, error) {
	dumpTLS, err := server.BinlogTLS(ctx, cfg, db)
	if err != nil {
		return nil, err
	}
	bc := binlog.ConfigFrom(cfg)
	bc.TLS = dumpTLS
	bc.Admit = preflight.Admitter{Config: cfg, DB: db, Log: log}
	bc.Columns = &server.ColumnReader{DB: db}
	bc.Logger = log.With().Str("component", "binlog").Logger()
	bc.Metrics = m
	bc.Layouts = layouts
	return binlog.NewReader(bc)
}

// serverIDDrops are the recent drops of the stream for another connection with our server_id.
type serverIDDrops []time.Time

// add records a drop (err, a binlog.ErrServerIDInUse) now, and returns the fatal error once
// there were sameIDDropLimit within sameIDWindow. One drop is what a restart after our own
// crash does to the stale dump thread (that one gets the error, not us) or what a short
// overlap does; streams that keep cutting each other off are two replicas with one server_id.
func (d *serverIDDrops) add(cfg *config.Config, err error) error {
	now := time.Now()
	*d = slices.DeleteFunc(*d, func(t time.Time) bool { return now.Sub(t) > sameIDWindow })
	*d = append(*d, now)
	if len(*d) < sameIDDropLimit {
		return nil
	}
	return fmt.Errorf("source %s: server_id %d is used by another replica: the server dropped this binlog stream %d times within %s for another connection with the same server_id, "+
		"so the two keep cutting each other off; give every outboxd and every replica of this server its own source.server_id "+
		"(the other may be a second outboxd started with this config): %w",
		cfg.Source.Addr, cfg.Source.ServerID, len(*d), sameIDWindow, err)
}

// Source heartbeats: an idle server sends one every period, which keeps the lag gauge at 0
// when caught up; source.read_timeout (which config validates to exceed the period) notices a
// dead connection.
const sourceHeartbeatPeriod = config.SourceHeartbeatPeriod

// runSession streams from start through pl until ctx ends, the stream fails or the pipeline
// stops. The pipeline drains and saves its checkpoint before it returns.
func runSession(ctx context.Context, reader *binlog.Reader, pl *pipeline.Pipeline, start gtid.Set) error {
	// The reader stops at once on shutdown; the pipeline gets the same signal but drains the
	// round in flight and saves the checkpoint before it returns.
	// Small: the tracker's capacity is the real bound, and a piece holds up to 512 events.
	txns := make(chan *binlog.Txn, 16)
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	g := new(errgroup.Group)
	g.Go(func() error {
		err := reader.Run(readCtx, start, txns)
		if err != nil && readCtx.Err() == nil {
			stopReading()
			return fmt.Errorf("binlog reader: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		err := pl.Run(readCtx, txns)
		stopReading()
		return err
	})
	return g.Wait()
}

// declareSinks creates every sink's and route's series at 0.
func declareSinks(m *metrics.Metrics, cfg *config.Config) {
	routes := map[string][]string{}
	for name := range cfg.Sinks {
		routes[name] = nil
	}
	for i, r := range cfg.Routes {
		routes[r.Sink] = append(routes[r.Sink], r.Label(i))
	}
	if dl := cfg.DeadLetter; dl != nil && cfg.OnPoison == pipeline.PoisonDeadLetter {
		routes[dl.Sink] = append(routes[dl.Sink], metrics.RouteDeadLetter)
	}
	for name, rs := range routes {
		m.DeclareSink(name, rs)
	}
	declareTables(m, cfg)
}

// openSource connects to the source for the start-up queries: to the first of source.addrs
// that answers, in order. A server that is restarting or a network that is briefly away is
// waited for with the reconnect backoff, as a lost stream is, and retrying hears each failed
// attempt; a refused login is a configuration error and ends the run at once. It returns the
// address it reached.
func openSource(ctx context.Context, cfg *config.Config, log zerolog.Logger, retrying func(error)) (string, *sql.DB, error) {
	if len(cfg.Source.Addrs) <= 1 {
		db, err := server.OpenReporting(ctx, server.SourceConn(cfg), "source", log, retrying)
		return cfg.Source.Addr, db, err
	}
	var (
		reached string
		db      *sql.DB
		stop    bool // a candidate answered with an error, or ctx ended: not retried
	)
	r := server.ReconnectRetry(func(error) bool { return !stop })
	r.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("backoff", in).Msg("no source candidate reachable at start, retrying")
		retrying(err)
	}
	err := r.Do(ctx, func() error {
		var errs []error
		for _, addr := range cfg.Source.Addrs {
			d, err := server.Open(ctx, server.SourceConn(cfg.SourceAt(addr)))
			if err == nil {
				reached, db = addr, d
				return nil
			}
			if sqlerr.Answered(err) || ctx.Err() != nil {
				stop = true
				return fmt.Errorf("%s: %w", addr, err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		return errors.Join(errs...)
	})
	return reached, db, err
}
