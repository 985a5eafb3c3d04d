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

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/failover"
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

// ops is the operator side of a running daemon: the admin server, the position sampler, sink
// probes and the heartbeat row writer. Safe for concurrent use.
type ops struct {
	cfg     *config.Config
	m       *metrics.Metrics
	sinks   map[string]sink.Sink
	src     *failover.Sources // the source candidates; the sampler queries the current one
	saved   *savedStore       // the checkpoint on disk
	started time.Time
	version string
	log     zerolog.Logger
	role    *roleHolder      // leader or standby: the duties with side effects run only on the leader
	now     func() time.Time // the process's clock (Options.Now); nil is time.Now

	mu sync.Mutex
	pl *pipeline.Pipeline // the current session's pipeline

	probeMu sync.Mutex // one probe round at a time
}

// setPipeline switches the status and gauges to a new session's pipeline.
func (o *ops) setPipeline(pl *pipeline.Pipeline) {
	o.mu.Lock()
	o.pl = pl
	o.mu.Unlock()
	o.m.SetPipeline(pl)
}

func (o *ops) sourceAddr() string {
	addr, _ := o.src.Current()
	return addr
}

// clearPipeline detaches the last session's pipeline when a term as leader ends: a standby
// reports nothing in flight and nothing behind.
func (o *ops) clearPipeline() {
	o.mu.Lock()
	o.pl = nil
	o.mu.Unlock()
	o.m.SetPipeline(nil)
	o.m.SetBehind(metrics.Behind{})
}

func (o *ops) pipeline() *pipeline.Pipeline {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pl
}

// start binds the admin server (so a bad admin.listen fails the start) and starts the
// background loops; they stop when ctx ends, and the returned WaitGroup waits for them.
func (o *ops) start(ctx context.Context) (*sync.WaitGroup, error) {
	wg := &sync.WaitGroup{}
	if addr := o.cfg.Admin.Addr(); addr != "" {
		srv, err := admin.Listen(admin.Config{
			Listen:   addr,
			Gatherer: o.m.Registry(),
			Status:   o.status,
			Ready:    o.ready,
			Role:     func() string { return string(o.role.get().Role) },
			Logger:   o.log.With().Str("component", "admin").Logger(),
		})
		switch {
		case err != nil && o.cfg.Admin.Listen == nil:
			// Only the default address: another process (a second outboxd on this host) may
			// hold it, and the relay matters more than its metrics. An explicit address fails.
			o.log.Error().Err(err).Msg("admin server not started: no /metrics, /readyz or /status; set admin.listen to a free address")
		case err != nil:
			return nil, err
		}
		if srv != nil {
			wg.Go(func() {
				if err := srv.Serve(ctx); err != nil {
					o.log.Error().Err(err).Msg("admin server stopped; metrics and status are unavailable")
				}
			})
		}
	}
	wg.Go(func() { o.sampleLoop(ctx) })
	if hb := o.cfg.Source.Heartbeat; hb != nil {
		wg.Go(func() { o.heartbeatLoop(ctx, hb) })
	}
	if o.cfg.Reconcile != nil {
		p := &reconcile.Periodic{Config: o.cfg, Host: reconcileHost{o}, Marks: o.saved, Metrics: o.m, Log: o.log, Now: o.now}
		wg.Go(func() { p.Run(ctx) })
	}
	return wg, nil
}

// reconcileHost is what the periodic reconcile reads of the daemon.
type reconcileHost struct{ o *ops }

func (h reconcileHost) Leading() bool             { return h.o.role.leading() }
func (h reconcileHost) Source() (string, *sql.DB) { return h.o.src.Current() }
func (h reconcileHost) Checkpointed() (time.Time, bool) {
	st := h.o.saved.state()
	return st.last.CommitTime, st.ok && !st.last.CommitTime.IsZero()
}

// sampleLoop reads the server's position every sampleInterval to count the transactions not
// yet acknowledged (never per event: it is a query), the binlog retention gauges every
// retentionInterval, and probes idle sinks.
func (o *ops) sampleLoop(ctx context.Context) {
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	var lastPL *pipeline.Pipeline
	var lastAcked uint64
	var lastAt time.Time
	var retention retentionSampler
	for {
		o.probeSinks(ctx)
		if o.role.leading() {
			o.sampleRetention(ctx, &retention)
			o.keepHolderLock(ctx)
		}
		if pl := o.pipeline(); pl != nil && o.role.leading() {
			qctx, cancel := context.WithTimeout(ctx, sampleInterval)
			_, db := o.src.Current()
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
func (o *ops) keepHolderLock(ctx context.Context) {
	if ms, ok := o.saved.store.(checkpoint.HolderLocker); ok {
		kctx, cancel := context.WithTimeout(ctx, sampleInterval)
		ms.KeepHolderLock(kctx)
		cancel()
	}
}

// probeSinks checks every sink whose state is unknown or older than probeMaxAge; sinks that
// send keep their state fresh themselves and are not probed.
func (o *ops) probeSinks(ctx context.Context) {
	o.probeMu.Lock()
	defer o.probeMu.Unlock()
	states := o.m.Sinks()
	var wg sync.WaitGroup
	for name, s := range o.sinks {
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

// ready lists what is not ready: the source stream and every sink. A standby is ready when it
// could take over: its sinks are reachable and its wait for the lock reaches the writer (the
// stream is the leader's).
func (o *ops) ready(ctx context.Context) []string {
	var out []string
	st := o.role.status()
	switch {
	case st.Role != string(election.RoleLeader):
		if st.WaitError != "" {
			out = append(out, "leader lock: cannot wait for it: "+st.WaitError)
		}
		if st.Role == string(election.RoleFenced) || st.Role == "starting" {
			out = append(out, "role "+st.Role+": "+st.Reason)
		}
	default:
		if up, why := o.m.Source(); !up {
			addr, _ := o.src.Current()
			msg := "source " + addr + ": binlog stream not connected"
			if why != "" {
				msg += ": " + why
			}
			out = append(out, msg)
		}
	}
	o.probeSinks(ctx)
	states := o.m.Sinks()
	for _, name := range sortedNames(o.sinks) {
		st, ok := states[name]
		switch {
		case !ok:
			out = append(out, "sink "+name+": not probed yet")
		case !st.Up:
			out = append(out, "sink "+name+": unreachable: "+st.Error)
		}
	}
	if pl := o.pipeline(); pl != nil {
		for _, mt := range pl.MissingTopics() {
			then := "on_poison applies"
			if mt.DeadLetter {
				then = "outboxd stops (the dead-letter topic)"
			}
			out = append(out, fmt.Sprintf("sink %s: topic %s does not exist: messages wait for it since %s; create it (after retry.missing_topic_timeout %s %s)",
				mt.Sink, mt.Topic, mt.Since.UTC().Format(time.RFC3339), pl.MissingTopicTimeout(), then))
		}
	}
	return out
}

// status builds the /status document.
func (o *ops) status(context.Context) admin.Status {
	now := time.Now()
	lag := o.m.Lag()
	connected, why := o.m.Source()
	saved := o.saved.state()
	st := admin.Status{
		Version:              o.version,
		Flavor:               string(o.cfg.Source.Flavor),
		StartedAt:            o.started.UTC(),
		UptimeSeconds:        now.Sub(o.started).Seconds(),
		Source:               admin.Source{Addr: o.sourceAddr(), Connected: connected, LastError: why},
		CheckpointGTIDSet:    saved.last.GTIDSet,
		CheckpointSavedAt:    saved.last.SavedAt.UTC(),
		CheckpointCommitTime: saved.last.CommitTime.UTC(),
		LagSeconds:           lag.Lag.Seconds(),
		OldestUnackedSeconds: lag.OldestUnacked.Seconds(),
		CaughtUp:             lag.CaughtUp,
		Sinks:                map[string]admin.Sink{},
		HA:                   o.role.status(),
	}
	if pl := o.pipeline(); pl != nil {
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
	if saved.lastErr != nil {
		st.CheckpointSaveError = saved.lastErr.Error()
		st.CheckpointFailingSince = saved.failingSince.UTC()
	}
	states := o.m.Sinks()
	for name, sc := range o.cfg.Sinks {
		s := admin.Sink{Type: sc.Type}
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

// heartbeatLoop upserts the heartbeat row every interval on a connection of its own, so a
// quiet database still writes binlog transactions: they move the checkpoint and prove the whole
// path works. Failures are logged (at most once a minute while they last) and never stop the
// relay.
func (o *ops) heartbeatLoop(ctx context.Context, hb *config.Heartbeat) {
	schema, table, _ := strings.Cut(hb.Table, ".")
	stmt := fmt.Sprintf("INSERT INTO %s.%s (id, ts) VALUES (?, NOW(6)) ON DUPLICATE KEY UPDATE ts = NOW(6)",
		sqlident.Quote(schema), sqlident.Quote(table))
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
		if !o.role.leading() {
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

func sortedNames(m map[string]sink.Sink) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
