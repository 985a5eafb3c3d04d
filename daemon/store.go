package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/server"
)

// checkMarkColumn refuses, as check does, a mysql store table made before the reconcile mark's
// column, with the ALTER that adds it: the leader's first reconcile run would fail on it. A
// writer that does not answer is left to the session's reconnects. It blocks on one query.
// Only the mysql store can lack it: the kafka store's mark is a record (and reading it back
// would wait for the brokers before run has said what it waits for).
func checkMarkColumn(ctx context.Context, store checkpoint.Storage) error {
	ms, ok := store.(*checkpoint.MySQLStore)
	if !ok {
		return nil
	}
	if _, _, err := ms.LoadMark(ctx); errors.Is(err, checkpoint.ErrStoreMisconfigured) {
		return err
	}
	return nil
}

// markLost writes last, the position this process loaded or saved, as a tombstone in place of
// a checkpoint it found gone, and returns the error that stops it: a lost checkpoint is never
// replaced by source.start, which would skip what was committed since last.
func markLost(ctx context.Context, store checkpoint.Storage, cfg *config.Config, last checkpoint.Checkpoint, by, reason string) error {
	var err error
	// Written even while shutting down: the tombstone is what keeps the next start from
	// guessing (each store bounds the write itself).
	ctx = context.WithoutCancel(ctx)
	if ts, ok := store.(checkpoint.Tombstoner); ok {
		err = ts.MarkLost(ctx, last, by, reason)
	} else {
		err = store.Save(ctx, checkpoint.Tombstone(last, by, reason, time.Now()))
	}
	lost := &checkpoint.LostError{Where: cfg.Checkpoint.Where(), GTIDSet: last.GTIDSet, Lost: checkpoint.Lost{At: time.Now().UTC(), By: by, Reason: reason}}
	if err != nil {
		return fmt.Errorf("%w (the tombstone was not written: %w)", lost, err)
	}
	return lost
}

// storeFault ends a session when a save of the mysql store fails in a way that waiting with
// reading paused cannot fix: a writer that is away takes the reconnect path (as a lost stream
// does), a misconfigured table or grant stops the daemon with the fix, a superseded row or a
// lost checkpoint (either store) halts it (pipeline.ErrHalt: nothing more is sent) and stops
// it. The file store's other failures never land here: they keep pipeline's pause-and-retry
// for SaveFailureLimit (30 s). Safe for concurrent use.
type storeFault struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the running session; nil between sessions
}

// report is called with every failed save.
func (f *storeFault) report(err error) {
	if !errors.Is(err, checkpoint.ErrUnreachable) && !errors.Is(err, checkpoint.ErrStoreMisconfigured) &&
		!errors.Is(err, checkpoint.ErrSuperseded) {
		return // transient (a lock wait): the pipeline retries
	}
	if errors.Is(err, checkpoint.ErrSuperseded) || errors.Is(err, checkpoint.ErrCheckpointLost) {
		// Another process claimed the row: it relays this checkpoint now. Halt as after a
		// fence (no drain of the queued batches into the broker beside it, no final save,
		// which would be refused anyway).
		err = fmt.Errorf("%w: %w", pipeline.ErrHalt, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		f.cancel(err)
	}
}

// session returns a context for one session that a fatal store failure cancels, and a function
// that ends the session and tells the cause: the store's error, turned into a disconnect when
// the writer was unreachable; nil when the store did not end it.
func (f *storeFault) session(ctx context.Context) (context.Context, func() error) {
	sctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	f.cancel = cancel
	f.mu.Unlock()
	return sctx, func() error {
		f.mu.Lock()
		f.cancel = nil
		f.mu.Unlock()
		cause := context.Cause(sctx)
		cancel(nil)
		if ctx.Err() != nil || cause == nil || errors.Is(cause, context.Canceled) {
			return nil
		}
		if errors.Is(cause, checkpoint.ErrUnreachable) {
			return fmt.Errorf("%w: checkpoint writer: %w", binlog.ErrDisconnected, cause)
		}
		return cause
	}
}

// pingWriter waits, with the reconnect backoff, until the mysql store's writer answers again
// before the next session (a no-op for the file store). It returns nil when ctx ends.
func pingWriter(ctx context.Context, store checkpoint.Storage, log zerolog.Logger) {
	ms, ok := store.(checkpoint.Pinger)
	if !ok {
		return
	}
	if ctx.Err() != nil {
		return
	}
	r := server.ReconnectRetry(nil) // every failed ping is waited out, until ctx ends
	r.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("retry_in", in).Msg("checkpoint writer not reachable, waiting")
	}
	_ = r.Do(ctx, func() error { return ms.Ping(ctx) }) // it fails only when ctx ended
}

// resumeSaved writes the acknowledged position before the next session when the last save did
// not reach the store (the writer went away during the session's final save): a new session
// saves only on new progress, so an idle server would otherwise keep the older row until the
// next transaction. It waits for the writer with the reconnect backoff while it is away and
// returns nil when ctx ends; any other failure is returned (the daemon stops with it).
func resumeSaved(ctx context.Context, saver *savedStore, start gtid.Set, log zerolog.Logger) error {
	if _, away := saver.store.(checkpoint.Pinger); !away || saver.state().Last.GTIDSet == start.String() {
		return nil // a store that is never away (the file) ends the run on failed saves (pipeline's SaveFailureLimit)
	}
	if ctx.Err() != nil {
		return nil
	}
	r := server.ReconnectRetry(func(err error) bool { return errors.Is(err, checkpoint.ErrUnreachable) })
	r.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("retry_in", in).Msg("checkpoint writer not reachable, waiting")
	}
	err := r.Do(ctx, func() error {
		return saver.Save(ctx, checkpoint.Checkpoint{Flavor: start.Flavor(), GTIDSet: start.String(), SavedAt: time.Now().UTC()})
	})
	if err != nil && !errors.Is(err, checkpoint.ErrUnreachable) {
		return fmt.Errorf("save the acknowledged position %s before reconnecting: %w: %w", start, pipeline.ErrCheckpointSave, err)
	}
	return nil // saved, or ctx ended while the writer was away
}
