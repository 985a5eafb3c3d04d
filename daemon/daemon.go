// Package daemon runs the relay: it opens the checkpoint, decides where to start reading, and
// wires the binlog reader, the router, the pipeline and the sinks under one errgroup.
package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/sink/rocketmq"
)

// Options are the run command's flags.
type Options struct {
	// FromGTID replays from this executed set instead of the checkpoint.
	FromGTID string
	// Force accepts a start set that lacks a source the server has.
	Force  bool
	Logger zerolog.Logger
	// Version is reported by /status and outboxd_build_info.
	Version string
}

// Reconnect backoff after a lost source connection.
const (
	reconnectInitial = time.Second
	reconnectMax     = 10 * time.Second
	// reconnectReset: a session that streamed this long starts the backoff over.
	reconnectReset = time.Minute
)

// Run relays until ctx ends (then it drains, saves the checkpoint and returns nil) or a fatal
// error: a poison row under on_poison: stop, a checkpoint that cannot be written, a start
// position the server lacks, a refused login. A lost source connection is not fatal: the
// in-flight sends drain, the checkpoint is saved, and the stream restarts from the
// acknowledged position with backoff. It blocks for the life of the daemon. The admin server
// (admin.listen) and the heartbeat row writer (source.heartbeat) run alongside.
func Run(ctx context.Context, cfg *config.Config, o Options) error {
	log := o.Logger
	started := time.Now()
	store, err := checkpoint.Open(cfg.Checkpoint.Path)
	if err != nil {
		return err
	}
	defer store.Close()

	db, err := server.Open(ctx, sourceConn(cfg))
	if err != nil {
		return fmt.Errorf("connect to source %s: %w", cfg.Source.Addr, err)
	}
	defer db.Close()

	start, origin, err := ResolveStart(ctx, db, cfg, store, o.FromGTID, o.Force)
	if err != nil {
		return err
	}
	log.Info().Str("flavor", string(cfg.Source.Flavor)).Str("gtid_set", start.String()).
		Str("from", origin).Msg("starting")

	sinks, err := OpenSinks(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range sinks {
			s.Close()
		}
	}()
	rt, err := router.New(cfg)
	if err != nil {
		return err
	}
	m := metrics.New(metrics.Options{Version: o.Version, HeartbeatPeriod: sourceHeartbeatPeriod})
	if cp, err := store.Load(); err == nil && cp != nil {
		m.CheckpointLoaded(cp.SavedAt, cp.CommitTime)
	}
	declareSinks(m, cfg)
	reader, err := binlog.NewReader(binlog.Config{
		Flavor:          cfg.Source.Flavor,
		Addr:            cfg.Source.Addr,
		User:            cfg.Source.User,
		Password:        cfg.Source.Password,
		ServerID:        cfg.Source.ServerID,
		Tables:          TableSpecs(cfg),
		Columns:         &server.ColumnReader{DB: db},
		Logger:          log.With().Str("component", "binlog").Logger(),
		HeartbeatPeriod: sourceHeartbeatPeriod,
		ReadTimeout:     sourceReadTimeout,
		Metrics:         m,
	})
	if err != nil {
		return err
	}

	ops := &ops{cfg: cfg, m: m, sinks: sinks, db: db, started: started, version: o.Version, log: log}
	// The operator side (admin server, position sampler, heartbeat row) lives as long as Run
	// and never decides its outcome.
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	opsDone, err := ops.start(opsCtx)
	if err != nil {
		stopOps()
		return err
	}
	defer func() {
		stopOps()
		opsDone.Wait()
	}()

	backoff := reconnectInitial
	for {
		pl, err := pipeline.New(pipeline.Config{
			Router:             rt,
			Sinks:              sinks,
			Saver:              store,
			Start:              start,
			OnPoison:           cfg.OnPoison,
			RetryInitial:       cfg.Retry.Initial,
			RetryMax:           cfg.Retry.Max,
			CheckpointInterval: cfg.Checkpoint.Interval,
			MaxInflightEvents:  cfg.Pipeline.MaxInflightEvents,
			MaxInflightBytes:   cfg.Pipeline.MaxInflightBytes,
			Logger:             log.With().Str("component", "pipeline").Logger(),
			Metrics:            m,
		})
		if err != nil {
			return err
		}
		ops.setPipeline(pl)
		began := time.Now()
		err = runSession(ctx, reader, pl, start)
		start = pl.Acked()
		if err == nil || ctx.Err() != nil {
			log.Info().Str("gtid_set", start.String()).Msg("stopped")
			return err
		}
		if !errors.Is(err, binlog.ErrDisconnected) {
			log.Info().Str("gtid_set", start.String()).Msg("stopped")
			return err
		}
		if time.Since(began) >= reconnectReset {
			backoff = reconnectInitial
		}
		log.Warn().Err(err).Dur("retry_in", backoff).Str("gtid_set", start.String()).
			Msg("source connection lost; in-flight sends drained, reconnecting from the acknowledged position")
		select {
		case <-ctx.Done():
			log.Info().Str("gtid_set", start.String()).Msg("stopped")
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, reconnectMax)
	}
}

// Source heartbeats: an idle server sends one every period, which keeps the lag gauge at 0
// when caught up; the read timeout notices a dead connection.
const (
	sourceHeartbeatPeriod = time.Second
	sourceReadTimeout     = 10 * time.Second
)

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

// ResolveStart picks the executed GTID set to resume from, and says where it came from:
// --from-gtid, the checkpoint, or source.start (latest, earliest or a set) when there is no
// checkpoint. A set that lacks a source the server has would replay that source from its very
// beginning, so it is refused unless force.
func ResolveStart(ctx context.Context, db *sql.DB, cfg *config.Config, store *checkpoint.Store, fromGTID string, force bool) (gtid.Set, string, error) {
	flavor := cfg.Source.Flavor
	serverPos, err := server.Position(ctx, db, flavor)
	if err != nil {
		return gtid.Set{}, "", fmt.Errorf("read the server's GTID position: %w", err)
	}
	var start gtid.Set
	var origin string
	switch {
	case fromGTID != "":
		if start, err = gtid.Parse(flavor, fromGTID); err != nil {
			return gtid.Set{}, "", fmt.Errorf("--from-gtid: %w", err)
		}
		origin = "--from-gtid"
	default:
		cp, err := store.Load()
		if err != nil {
			return gtid.Set{}, "", err
		}
		if cp != nil {
			if cp.Flavor != flavor {
				return gtid.Set{}, "", fmt.Errorf("checkpoint %s is for flavor %s but source.flavor is %s: point checkpoint.path elsewhere or fix source.flavor",
					cfg.Checkpoint.Path, cp.Flavor, flavor)
			}
			if start, err = cp.Set(); err != nil {
				return gtid.Set{}, "", fmt.Errorf("checkpoint %s: %w", cfg.Checkpoint.Path, err)
			}
			return start, "checkpoint", nil // it was checked when it was first chosen
		}
		switch s := strings.TrimSpace(cfg.Source.Start); s {
		case "", "latest":
			return serverPos, "source.start: latest", nil
		case "earliest":
			return gtid.Empty(flavor), "source.start: earliest", nil
		default:
			if start, err = gtid.Parse(flavor, s); err != nil {
				return gtid.Set{}, "", fmt.Errorf("source.start: %w", err)
			}
			origin = "source.start"
		}
	}
	if missing := start.MissingSources(serverPos); len(missing) > 0 && !force {
		what := "server UUIDs"
		if flavor == gtid.MariaDB {
			what = "domains"
		}
		return gtid.Set{}, "", fmt.Errorf("%s %s lacks %s %s that the server has (%s): starting there would replay them from their first transaction; add their current positions to the set, or pass --force to do exactly that",
			origin, start, what, strings.Join(missing, ", "), serverPos)
	}
	return start, origin, nil
}

// OpenSinks creates every configured sink.
func OpenSinks(cfg *config.Config, log zerolog.Logger) (map[string]sink.Sink, error) {
	sinks := make(map[string]sink.Sink, len(cfg.Sinks))
	for _, sc := range cfg.Sinks {
		if sc.Type == "rocketmq" {
			// The RocketMQ client's logger is process-wide: route it once, warnings and up.
			rocketmq.RouteClientLog(log.With().Str("component", "rocketmq-client").Logger(), zerolog.WarnLevel)
			break
		}
	}
	for name, sc := range cfg.Sinks {
		var s sink.Sink
		var err error
		switch sc.Type {
		case "kafka":
			s, err = kafka.New(name, kafka.Config{
				Brokers:         sc.Brokers,
				ClientID:        sc.ClientID,
				Timeout:         sc.Timeout,
				MaxMessageBytes: sc.MaxMessageBytes,
				Logger:          log.With().Str("sink", name).Logger(),
			})
		case "rocketmq":
			s, err = rocketmq.New(name, rocketmq.Config{
				NameServers: sc.Nameservers,
				Group:       sc.Group,
				Namespace:   sc.Namespace,
				AccessKey:   sc.AccessKey,
				SecretKey:   sc.SecretKey,
				SendTimeout: sc.SendTimeout,
				Name:        name,
				Logger:      log.With().Str("sink", name).Logger(),
			})
		default:
			err = fmt.Errorf("sink type %q is not supported by this build", sc.Type)
		}
		if err != nil {
			for _, o := range sinks {
				o.Close()
			}
			return nil, fmt.Errorf("sinks.%s: %w", name, err)
		}
		sinks[name] = s
	}
	return sinks, nil
}

// TableSpecs turns the configured outbox tables into the reader's table list.
func TableSpecs(cfg *config.Config) []binlog.TableSpec {
	specs := make([]binlog.TableSpec, 0, len(cfg.Tables))
	for _, t := range cfg.Tables {
		c := t.Columns
		specs = append(specs, binlog.TableSpec{
			Schema: t.Schema(),
			Table:  t.Name(),
			Columns: binlog.ColumnNames{
				EventID: c.EventID, Key: c.Key, Topic: c.Topic, Payload: c.Payload,
				EventType: c.EventType, Headers: c.Headers,
			},
		})
	}
	return specs
}

func sourceConn(cfg *config.Config) server.Conn {
	return server.Conn{Flavor: cfg.Source.Flavor, Addr: cfg.Source.Addr, User: cfg.Source.User, Password: cfg.Source.Password}
}

// Check verifies the source server and every sink, returning one line per problem with what to
// change. It blocks until every check answered or ctx ends; err is for failures to check at all.
func Check(ctx context.Context, cfg *config.Config, log zerolog.Logger) (problems []string, warnings []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := server.Open(ctx, sourceConn(cfg))
	if err != nil {
		problems = append(problems, fmt.Sprintf("source %s: cannot connect: %v", cfg.Source.Addr, err))
	} else {
		defer db.Close()
		tables := make([]string, len(cfg.Tables))
		for i, t := range cfg.Tables {
			tables[i] = t.Table
		}
		ps, err := server.Check(ctx, db, cfg.Source.Flavor, tables)
		if err != nil {
			return nil, nil, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
		}
		for _, p := range ps {
			line := fmt.Sprintf("source %s: %s is %s: %s", cfg.Source.Addr, p.Setting, p.Found, p.Fix)
			if p.Warning {
				warnings = append(warnings, line)
			} else {
				problems = append(problems, line)
			}
		}
	}
	sinks, err := OpenSinks(cfg, log)
	if err != nil {
		return append(problems, err.Error()), warnings, nil
	}
	defer func() {
		for _, s := range sinks {
			s.Close()
		}
	}()
	for name, s := range sinks {
		c, ok := s.(sink.Checker)
		if !ok {
			continue
		}
		if err := c.Check(ctx, staticTopics(cfg, name)); err != nil {
			problems = append(problems, fmt.Sprintf("sink %s: %v", name, err))
		}
	}
	return problems, warnings, nil
}

// staticTopics lists the destination topics of sink name that have no placeholders, the ones
// check can verify before any row arrives.
func staticTopics(cfg *config.Config, name string) []string {
	var topics []string
	for _, r := range cfg.Routes {
		if r.Sink == name && !strings.Contains(r.Topic, "{") {
			topics = append(topics, r.Topic)
		}
	}
	if dl := cfg.DeadLetter; dl != nil && cfg.OnPoison == pipeline.PoisonDeadLetter && dl.Sink == name {
		topics = append(topics, dl.Topic)
	}
	return topics
}

// declareSinks creates every sink's and route's series at 0.
func declareSinks(m *metrics.Metrics, cfg *config.Config) {
	routes := map[string][]string{}
	for name := range cfg.Sinks {
		routes[name] = nil
	}
	for i, r := range cfg.Routes {
		routes[r.Sink] = append(routes[r.Sink], strconv.Itoa(i))
	}
	if dl := cfg.DeadLetter; dl != nil && cfg.OnPoison == pipeline.PoisonDeadLetter {
		routes[dl.Sink] = append(routes[dl.Sink], metrics.RouteDeadLetter)
	}
	for name, rs := range routes {
		m.DeclareSink(name, rs)
	}
}
