// Package ops is what a running daemon reports and samples for its operator: the /status
// and /readyz content (served by admin), the position sampler (transactions_behind), the
// binlog retention gauges, sink probes, the heartbeat row, the mysql store's holder lock kept
// while idle, and the periodic reconcile. It reads the relay through Relay and never decides
// the relay's outcome.
package ops

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink"
)

const (
	// sampleInterval is how often the server's position is read for transactions_behind, and
	// idle sinks are probed.
	sampleInterval = 5 * time.Second
	// probeTimeout bounds one sink probe.
	probeTimeout = 2 * time.Second
	// probeMaxAge: a sink state older than this is refreshed by a probe (sends refresh it too).
	probeMaxAge = 5 * time.Second
)

// Relay is what ops reads of the running relay. Its methods must be safe for concurrent use
// and must not block: /status and /readyz call them on every request.
type Relay interface {
	// Leading reports whether this process leads now: the duties with side effects on the
	// server (heartbeat row, position and retention sampling, the holder lock, reconcile) run
	// only then.
	Leading() bool
	// Source is the candidate streaming now (or last) and its pool (nil before it was opened).
	Source() (addr string, db *sql.DB)
	// Pipeline is the current term's pipeline; nil while none runs (a standby reports nothing
	// in flight).
	Pipeline() *pipeline.Pipeline
	// Saved is the checkpoint as this process last loaded or saved it.
	Saved() Saved
	// HA is the ha part of /status; its Role is "starting" before the process has one.
	HA() admin.HA
}

// Saved is the checkpoint as this process last loaded or saved it, and how its saves fail.
type Saved struct {
	Last         checkpoint.Checkpoint
	OK           bool      // Last holds a checkpoint
	FailingSince time.Time // since when saves fail; zero while they succeed
	Err          error     // the last save's failure; nil once one succeeded
}

// Config is what ops is built from before the relay exists.
type Config struct {
	Config  *config.Config
	Metrics *metrics.Metrics
	Started time.Time // when the process started, for /status
	Version string    // reported by /status
	Logger  zerolog.Logger
	Now     func() time.Time // the process's clock (for reconcile); nil is time.Now
	// ClockEvery is how often the leader reads the source's clock; 0 means clockInterval (a
	// minute). For tests that move the database's clock.
	ClockEvery time.Duration
}

// Running is the relay once start-up has wired it: what Start hands to the loops and to
// /readyz and /status.
type Running struct {
	Relay Relay
	Sinks map[string]sink.Sink // probed, and listed by /readyz
	// HolderLock is the checkpoint store's holder lock (the mysql store), re-taken while the
	// leader is idle; nil when the store has none.
	HolderLock checkpoint.HolderLocker
	// Marks keeps the periodic reconcile's mark with the checkpoint (see reconcile.Periodic);
	// only used with reconcile configured.
	Marks checkpoint.ReconcileMark
}

// Ops is the operator side of a daemon: the admin server from the first second of start-up
// (Listen), then the position sampler, sink probes, the heartbeat row writer and the periodic
// reconcile (Start). Safe for concurrent use.
type Ops struct {
	cfg     *config.Config
	m       *metrics.Metrics
	started time.Time
	version string
	log     zerolog.Logger
	now     func() time.Time
	// clockEvery is how often the leader reads the source's clock (Config.ClockEvery).
	clockEvery time.Duration

	// run is nil until Start: /readyz and /status then report the start-up step instead.
	run     atomic.Pointer[Running]
	startup startup

	probeMu sync.Mutex // one probe round at a time
	wg      sync.WaitGroup
}

// New builds the operator side of a daemon; nothing runs before Listen.
func New(c Config) *Ops {
	o := &Ops{cfg: c.Config, m: c.Metrics, started: c.Started, version: c.Version, log: c.Logger, now: c.Now, clockEvery: c.ClockEvery}
	if o.clockEvery <= 0 {
		o.clockEvery = clockInterval
	}
	o.startup.step = "starting"
	return o
}

// Listen binds the admin server (so a bad admin.listen fails the start) and serves it until
// ctx ends, before the daemon reaches its servers: /healthz answers at once, and /readyz and
// /status name the start-up step that holds the start (Step, Blocked) until Start. It blocks
// only to bind the address; on an error nothing was started. Wait waits for the server after
// ctx ended. Call it once, before Start.
func (o *Ops) Listen(ctx context.Context) error {
	if addr := o.cfg.Admin.Addr(); addr != "" {
		srv, err := admin.Listen(admin.Config{
			Listen:   addr,
			Gatherer: o.m.Registry(),
			Status:   o.status,
			Ready:    o.ready,
			Role:     o.role,
			Logger:   o.log.With().Str("component", "admin").Logger(),
		})
		switch {
		case err != nil && o.cfg.Admin.Listen == nil:
			// Only the default address: another process (a second outboxd on this host) may
			// hold it, and the relay matters more than its metrics. An explicit address fails.
			o.log.Error().Err(err).Msg("admin server not started: no /metrics, /readyz or /status; set admin.listen to a free address")
		case err != nil:
			return err
		}
		if srv != nil {
			o.wg.Go(func() {
				if err := srv.Serve(ctx); err != nil {
					o.log.Error().Err(err).Msg("admin server stopped; metrics and status are unavailable")
				}
			})
		}
	}
	return nil
}

// Start hands the wired relay to /readyz and /status and starts the background loops; they
// stop when ctx ends, and Wait waits for them. It does not block. Call it once, after Listen.
func (o *Ops) Start(ctx context.Context, run Running) {
	o.run.Store(&run)
	o.wg.Go(func() { o.sampleLoop(ctx, &run) })
	if hb := o.cfg.Source.Heartbeat; hb != nil {
		o.wg.Go(func() { o.heartbeatLoop(ctx, run.Relay, hb) })
	}
	if o.cfg.Reconcile != nil {
		p := &reconcile.Periodic{Config: o.cfg, Host: reconcileHost{run.Relay}, Marks: run.Marks, Metrics: o.m, Log: o.log, Now: o.now}
		o.wg.Go(func() { p.Run(ctx) })
	}
}

// Wait blocks until the admin server and the loops have returned, after their ctx ended.
func (o *Ops) Wait() { o.wg.Wait() }

// role is the role /readyz names: none before the process has one (/status says "starting").
func (o *Ops) role() string {
	run := o.run.Load()
	if run == nil {
		return ""
	}
	if r := run.Relay.HA().Role; r != "starting" {
		return r
	}
	return ""
}

// reconcileHost is what the periodic reconcile reads of the daemon.
type reconcileHost struct{ Relay }

func (h reconcileHost) Checkpointed() (time.Time, bool) {
	st := h.Saved()
	return st.Last.CommitTime, st.OK && !st.Last.CommitTime.IsZero()
}

// sampleLoop reads the server's position every sampleInterval to count the transactions not
// yet acknowledged (never per event: it is a query), the binlog retention gauges every
// retentionInterval, and probes idle sinks.
func (o *Ops) sampleLoop(ctx context.Context, run *Running) {
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	var lastPL *pipeline.Pipeline
	var lastAcked uint64
	var lastAt time.Time
	var retention retentionSampler
	var clock clockSampler
	sinksLogged := sinkLog{}
	for {
		o.probeSinks(ctx, run.Sinks)
		if ctx.Err() == nil {
			sinksLogged.update(o.log, o.m.Sinks())
		}
		if run.Relay.Leading() {
			o.sampleClock(ctx, run.Relay, &clock)
			o.sampleRetention(ctx, run.Relay, &retention)
			o.keepHolderLock(ctx, run.HolderLock)
		}
		if pl := run.Relay.Pipeline(); pl != nil && run.Relay.Leading() {
			qctx, cancel := context.WithTimeout(ctx, sampleInterval)
			_, db := run.Relay.Source()
			pos, err := server.Position(qctx, db, o.cfg.Source.Flavor)
			cancel()
			if err == nil {
				now := time.Now()
				acked := pl.AckedTransactions()
				n, err := metrics.CountBehind(pos, pl.Acked())
				if err == nil {
					b := metrics.Behind{Transactions: n, At: now}
					if pl == lastPL && now.After(lastAt) {
						b.Rate = float64(acked-lastAcked) / now.Sub(lastAt).Seconds()
					}
					o.m.SetBehind(b)
				}
				lastPL, lastAcked, lastAt = pl, acked, now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// keepHolderLock re-takes the mysql store's holder lock if its connection dropped: an idle
// leader saves nothing, and without the lock backfill and checkpoint set would run beside it.
func (o *Ops) keepHolderLock(ctx context.Context, holder checkpoint.HolderLocker) {
	if holder == nil {
		return
	}
	kctx, cancel := context.WithTimeout(ctx, sampleInterval)
	holder.KeepHolderLock(kctx)
	cancel()
}

// probeSinks checks every sink whose state is unknown or older than probeMaxAge; sinks that
// send keep their state fresh themselves and are not probed.
func (o *Ops) probeSinks(ctx context.Context, sinks map[string]sink.Sink) {
	o.probeMu.Lock()
	defer o.probeMu.Unlock()
	states := o.m.Sinks()
	var wg sync.WaitGroup
	for name, s := range sinks {
		c, ok := s.(sink.Checker)
		if !ok {
			continue
		}
		if st, ok := states[name]; ok && time.Since(st.At) < probeMaxAge {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			err := c.Check(pctx, nil)
			if ctx.Err() == nil {
				o.m.SinkResult(name, err)
			}
		})
	}
	wg.Wait()
}

// ready lists what is not ready, probing the sinks whose state is stale first: the start-up
// step until the relay runs, then the source stream and every sink. A standby is ready when
// it could take over: its sinks are reachable and its wait for the lock reaches the writer
// (the stream is the leader's). ctx bounds the probes.
func (o *Ops) ready(ctx context.Context) []string {
	if run := o.run.Load(); run != nil {
		o.probeSinks(ctx, run.Sinks)
	}
	out, _ := o.notReady()
	return out
}

// notReady is what /readyz lists and /status shows, from the latest states (no probe): every
// reason in order, and the sinks' own reasons by sink. One source of truth for both.
func (o *Ops) notReady() (all []string, bySink map[string][]string) {
	run := o.run.Load()
	if run == nil {
		return []string{o.startup.reason()}, nil
	}
	st := run.Relay.HA()
	switch {
	case st.Role != string(election.RoleLeader):
		if st.WaitError != "" {
			all = append(all, "leader lock: cannot wait for it: "+st.WaitError)
		}
		if st.Role == string(election.RoleFenced) || st.Role == "starting" {
			all = append(all, "role "+st.Role+": "+st.Reason)
		}
	default:
		if up, why := o.m.Source(); !up {
			addr, _ := run.Relay.Source()
			msg := "source " + addr + ": binlog stream not connected"
			if why != "" {
				msg += ": " + why
			}
			all = append(all, msg)
		}
	}
	bySink = map[string][]string{}
	add := func(name, why string) {
		msg := "sink " + name + ": " + why
		all = append(all, msg)
		bySink[name] = append(bySink[name], msg)
	}
	states := o.m.Sinks()
	for _, name := range slices.Sorted(maps.Keys(run.Sinks)) {
		st, ok := states[name]
		switch {
		case !ok:
			add(name, "not probed yet")
		case !st.Up:
			add(name, "unreachable: "+st.Error)
		}
	}
	if pl := run.Relay.Pipeline(); pl != nil {
		for _, mt := range pl.MissingTopics() {
			then := "on_poison applies"
			if mt.DeadLetter {
				then = "outboxd stops (the dead-letter topic)"
			}
			add(mt.Sink, fmt.Sprintf("topic %s does not exist: messages wait for it since %s; create it (after retry.missing_topic_timeout %s %s)",
				mt.Topic, mt.Since.UTC().Format(time.RFC3339), pl.MissingTopicTimeout(), then))
		}
	}
	return all, bySink
}

// status builds the /status document: before the relay runs, the start-up step, the source's
// last connection error and the sinks as the config names them.
func (o *Ops) status(context.Context) admin.Status {
	now := time.Now()
	lag := o.m.Lag()
	connected, why := o.m.Source()
	notReady, sinkNotReady := o.notReady()
	st := admin.Status{
		Version:              o.version,
		Flavor:               string(o.cfg.Source.Flavor),
		StartedAt:            o.started.UTC(),
		UptimeSeconds:        now.Sub(o.started).Seconds(),
		Ready:                len(notReady) == 0,
		NotReady:             notReady,
		Source:               admin.Source{Addr: o.cfg.Source.Addr, Connected: connected, LastError: why},
		LagSeconds:           lag.Lag.Seconds(),
		OldestUnackedSeconds: lag.OldestUnacked.Seconds(),
		CaughtUp:             lag.CaughtUp,
		Sinks:                map[string]admin.Sink{},
		HA:                   admin.HA{Enabled: o.cfg.HA.Enabled, Role: "starting", Reason: o.startup.reason()},
	}
	if run := o.run.Load(); run != nil {
		o.relayStatus(&st, run.Relay, now)
	}
	states := o.m.Sinks()
	for name, sc := range o.cfg.Sinks {
		s := admin.Sink{Type: sc.Type, NotReady: sinkNotReady[name]}
		if ss, ok := states[name]; ok {
			s.Known, s.Up, s.At, s.Error = true, ss.Up, ss.At.UTC(), ss.Error
		}
		st.Sinks[name] = s
	}
	if b := o.m.LastBehind(); b.Transactions > 0 {
		c := &admin.CatchUp{TransactionsBehind: b.Transactions, RatePerSecond: b.Rate, SampledAt: b.At.UTC()}
		if b.Rate > 0 {
			c.ETASeconds = float64(b.Transactions) / b.Rate
		}
		st.CatchUp = c
	}
	return st
}

// relayStatus fills the parts of /status the running relay knows.
func (o *Ops) relayStatus(st *admin.Status, relay Relay, now time.Time) {
	saved := relay.Saved()
	st.Source.Addr, _ = relay.Source()
	st.CheckpointGTIDSet = saved.Last.GTIDSet
	st.CheckpointSavedAt = saved.Last.SavedAt.UTC()
	st.CheckpointCommitTime = saved.Last.CommitTime.UTC()
	st.HA = relay.HA()
	if pl := relay.Pipeline(); pl != nil {
		st.ReadGTIDSet = pl.ReadSet().String()
		st.AckedGTIDSet = pl.Acked().String()
		st.InFlight.Events, st.InFlight.Bytes = pl.InFlight()
		if oe, ok := pl.OldestEvent(); ok {
			st.OldestUnacked = &admin.OldestEvent{
				Table: oe.Table, ID: oe.ID, EventID: oe.EventID, Topic: oe.Topic, Sink: oe.Sink, GTID: oe.GTID,
				CommitTime: oe.CommitTime.UTC(), ReadAt: oe.ReadAt.UTC(), AgeSeconds: max(0, now.Sub(oe.ReadAt).Seconds()),
			}
		}
	}
	if saved.Err != nil {
		st.CheckpointSaveError = saved.Err.Error()
		st.CheckpointFailingSince = saved.FailingSince.UTC()
	}
}

// heartbeatLoop upserts the heartbeat row every interval on a connection of its own, so a
// quiet database still writes binlog transactions: they move the checkpoint and prove the whole
// path works. Failures are logged (at most once a minute while they last) and never stop the
// relay.
func (o *Ops) heartbeatLoop(ctx context.Context, relay Relay, hb *config.Heartbeat) {
	schema, table, _ := strings.Cut(hb.Table, ".")
	stmt := fmt.Sprintf("INSERT INTO %s (id, ts) VALUES (?, NOW(6)) ON DUPLICATE KEY UPDATE ts = NOW(6)",
		sqlident.Table(schema, table))
	log := o.log.With().Str("component", "heartbeat").Str("table", hb.Table).Logger()
	var db *sql.DB
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	var failingSince, lastLog time.Time
	tick := time.NewTicker(hb.Interval)
	defer tick.Stop()
	for {
		if !relay.Leading() {
			// A standby writes nothing; the leader's own loop keeps the row fresh.
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			continue
		}
		err := func() error {
			wctx, cancel := context.WithTimeout(ctx, max(hb.Interval, 2*time.Second))
			defer cancel()
			if db == nil {
				d, err := server.Open(wctx, server.SourceConn(o.cfg))
				if err != nil {
					return err
				}
				d.SetMaxOpenConns(1)
				db = d
			}
			_, err := db.ExecContext(wctx, stmt, o.cfg.Source.ServerID)
			if err != nil {
				return fmt.Errorf("%w; the user needs SELECT, INSERT and UPDATE on %s, and the table needs columns id (primary key) and ts", err, hb.Table)
			}
			return nil
		}()
		now := time.Now()
		switch {
		case err != nil && ctx.Err() == nil:
			if failingSince.IsZero() {
				failingSince = now
			}
			if now.Sub(lastLog) >= time.Minute {
				lastLog = now
				log.Warn().Err(err).Str("failing_since", logging.Time(failingSince)).Msg("heartbeat row not written")
			}
		case err == nil && !failingSince.IsZero():
			log.Info().Str("failing_since", logging.Time(failingSince)).Msg("heartbeat row written again")
			failingSince, lastLog = time.Time{}, time.Time{}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
