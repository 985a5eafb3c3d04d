package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/ops"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/startpos"
	"github.com/outboxd/outboxd/tablelayout"
)

// savedStore is the checkpoint store as the daemon writes it: every save of a run (the start
// position, the pipeline's periodic and final saves) goes through Save, which makes it the
// one place a rule about whether this process may save at all belongs. It remembers the last
// checkpoint that reached the disk, which /status reports, apart from what is acknowledged but
// not yet saved. Safe for concurrent use.
type savedStore struct {
	store checkpoint.Storage
	m     *metrics.Metrics
	// fault ends the session on a mysql store failure that pausing cannot fix (store.go).
	fault storeFault
	// layouts gives every save the outbox tables' layouts at its position (nil until the
	// first term checked them).
	layouts *tablelayout.Log

	mu sync.Mutex
	// guard, when set, must pass before every save: the leader's proof that it holds the lock
	// (election.Term.Check). A fenced leader's saves fail here without touching the store.
	guard func() error
	// scope is written with every save that carries none: what this process's checkpoint covers.
	scope        *checkpoint.Scope
	last         checkpoint.Checkpoint // on disk; zero Flavor before the first save or load
	failingSince time.Time             // of the current run of failed saves
	lastErr      error
}

// Save writes c durably and records it as the saved checkpoint, or records the failure. It
// blocks on the store's write, bounded by the store's own timeout but not by ctx's end: a
// save that began is finished, so a shutdown never leaves an acknowledged position unwritten
// nor reports a save failed only because the stop came while it ran.
func (s *savedStore) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	guard := s.guard
	s.mu.Unlock()
	if c.Layouts == nil {
		c.Layouts = s.layouts.At(c)
	}
	if guard != nil {
		if err := guard(); err != nil {
			return fmt.Errorf("not saved: %w", err)
		}
	}
	if c.Scope == nil {
		c.Scope = s.scope
	}
	err := s.store.Save(context.WithoutCancel(ctx), c)
	if err != nil {
		s.fault.report(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.lastErr == nil {
			s.failingSince = time.Now()
		}
		s.lastErr = err
		return err
	}
	s.last, s.lastErr, s.failingSince = c, nil, time.Time{}
	return nil
}

// Abort aborts the store's open broker transaction (pipeline.Committer; the kafka store of
// delivery: exactly_once); a no-op for a store without transactions.
func (s *savedStore) Abort(ctx context.Context) error {
	if a, ok := s.store.(interface{ Abort(context.Context) error }); ok {
		return a.Abort(ctx)
	}
	return nil
}

// setGuard sets the check every later save must pass (nil: none).
func (s *savedStore) setGuard(g func() error) {
	s.mu.Lock()
	s.guard = g
	s.mu.Unlock()
}

// loaded records the checkpoint read at start as the saved one.
func (s *savedStore) loaded(c *checkpoint.Checkpoint) {
	if c == nil {
		return
	}
	s.mu.Lock()
	s.last = *c
	s.mu.Unlock()
}

// state is what /status says about the checkpoint (ops.Saved).
func (s *savedStore) state() ops.Saved {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ops.Saved{Last: s.last, OK: s.last.Flavor != "", FailingSince: s.failingSince, Err: s.lastErr}
}

// LoadMark reads the reconcile mark from the checkpoint store (checkpoint.ReconcileMark). It
// blocks on the store.
func (s *savedStore) LoadMark(ctx context.Context) (time.Time, bool, error) {
	m, ok := s.store.(checkpoint.ReconcileMark)
	if !ok {
		return time.Time{}, false, fmt.Errorf("the checkpoint store %T keeps no reconcile mark", s.store)
	}
	return m.LoadMark(ctx)
}

// SaveMark moves the reconcile mark, only while this process may save the checkpoint (the
// leader's guard, as for Save): a fenced leader must not move it past rows its successor has
// not checked. The mysql store fences the write itself too. It blocks on the store.
func (s *savedStore) SaveMark(ctx context.Context, t time.Time) error {
	s.mu.Lock()
	guard := s.guard
	s.mu.Unlock()
	if guard != nil {
		if err := guard(); err != nil {
			return fmt.Errorf("reconcile mark not saved: %w", err)
		}
	}
	m, ok := s.store.(checkpoint.ReconcileMark)
	if !ok {
		return fmt.Errorf("the checkpoint store %T keeps no reconcile mark", s.store)
	}
	return m.SaveMark(ctx, t)
}

// persistStart writes the resolved start position as the checkpoint before anything streams,
// unless it came from the checkpoint itself. Without it a first run that stops before its
// first acknowledgement (no traffic, a broker that is down, a poison first row) leaves no
// checkpoint, and the next start with source.start: latest silently skips what was committed
// meanwhile. A --from-gtid replay is saved too: the operator chose to go there, so a restart
// without the flag goes on with the replay rather than jumping back to the old checkpoint.
// It blocks on the store's write, bounded by ctx; an error means nothing may stream.
func persistStart(ctx context.Context, saver pipeline.Saver, m *metrics.Metrics, start gtid.Set, origin string, log zerolog.Logger) error {
	if origin == startpos.OriginCheckpoint {
		return nil
	}
	c := checkpoint.Checkpoint{Flavor: start.Flavor(), GTIDSet: start.String(), SavedAt: time.Now().UTC()}
	if err := saver.Save(ctx, c); err != nil {
		m.CheckpointSaveFailed()
		fix := checkpoint.Fix(err) // the store's own; "" when its error says it already
		if fix != "" {
			fix = "; " + fix
		}
		return fmt.Errorf("save the start position %s (%s) as the checkpoint before streaming: %w: %w%s",
			c.GTIDSet, origin, pipeline.ErrCheckpointSave, err, fix)
	}
	m.CheckpointSaved(c.SavedAt, time.Time{})
	log.Info().Str("gtid_set", c.GTIDSet).Str("from", origin).Msg("start position saved as the checkpoint")
	return nil
}

// startupStopped turns the error of a start-up step that a requested shutdown (ctx ended)
// interrupted into nil: stopping is not a failure, whichever step it cut short (the source
// retries at start, the start position queries, opening the sinks). A checkpoint that could
// not be saved stays an error: the operator must know the position was not kept.
func startupStopped(ctx context.Context, err error, log zerolog.Logger) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, pipeline.ErrCheckpointSave) {
		return err
	}
	log.Info().AnErr("interrupted", err).Msg("stopped during start-up, as requested")
	return nil
}

// newSavedStore is the daemon's store for a whole run, with the checkpoint found at start
// recorded for /status and the metrics (a standby reports the leader's last saved checkpoint
// as it stood when it started).
func newSavedStore(ctx context.Context, store checkpoint.Storage, m *metrics.Metrics) *savedStore {
	saver := &savedStore{store: store, m: m, layouts: &tablelayout.Log{}}
	if cp, err := store.Load(ctx); err == nil && cp != nil {
		m.CheckpointLoaded(cp.SavedAt, cp.CommitTime)
		saver.loaded(cp)
	}
	return saver
}

// prepare persists a start position that did not come from the checkpoint (persistStart). A
// term that resumes from the checkpoint records what it read, for /status.
func (s *savedStore) prepare(ctx context.Context, start gtid.Set, origin string, log zerolog.Logger) error {
	if origin == startpos.OriginCheckpoint {
		if cp, err := s.store.Load(ctx); err == nil && cp != nil {
			s.loaded(cp)
		}
	}
	return persistStart(ctx, s, s.m, start, origin, log)
}

// logStopped logs the end of the run with the checkpoint on disk as gtid_set, and the
// acknowledged set beside it when a failed save left the two apart.
func (s *savedStore) logStopped(log zerolog.Logger, acked gtid.Set) {
	st := s.state()
	ev := log.Info().Str("gtid_set", st.Last.GTIDSet)
	if a := acked.String(); a != st.Last.GTIDSet {
		ev = ev.Str("acked_gtid_set", a)
	}
	ev.Msg("stopped")
}
