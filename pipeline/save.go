package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/internal/logging"
)

// ErrCheckpointSave is wrapped by the error Run returns when the checkpoint could not be
// written: for SaveFailureLimit while streaming, or once at the final save.
var ErrCheckpointSave = errors.New("checkpoint not saved")

// DefaultSaveFailureLimit is how long saves may fail before Run gives up. Long enough to ride
// out a brief storage hiccup (a network volume failing over, a full disk that logrotate is
// about to clear), short enough that a supervisor restart or a page follows within a minute;
// reading is paused meanwhile, so waiting longer would only delay the error.
const DefaultSaveFailureLimit = 30 * time.Second

// maxSaveRetry caps the interval between retries of a failed save.
const maxSaveRetry = 5 * time.Second

// saveGate is closed while checkpoint saves fail: the dispatcher then takes no new
// transaction. Safe for concurrent use. wait runs once per transaction, so it takes no lock:
// it loads the current channel; set (the saver, once per save) swaps it under mu.
type saveGate struct {
	mu   sync.Mutex                    // serialises set
	open atomic.Pointer[chan struct{}] // closed while saves succeed
}

func newSaveGate() *saveGate {
	g := &saveGate{}
	open := make(chan struct{})
	close(open)
	g.open.Store(&open)
	return g
}

// wait blocks while the gate is shut; it returns false if ctx ends first.
func (g *saveGate) wait(ctx context.Context) bool {
	select {
	case <-*g.open.Load():
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

func (g *saveGate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := *g.open.Load()
	select {
	case <-cur:
		if !open {
			shut := make(chan struct{})
			g.open.Store(&shut)
		}
	default:
		if open {
			close(cur)
		}
	}
}

// saveLoop writes the checkpoint every interval while it moves, and once more, moved or not,
// when done closes: every stop leaves the acknowledged position on disk. A failed save is
// counted, logged (at most every maxSaveRetry) and retried with reading paused; when saves have failed for
// SaveFailureLimit it calls stop with the error, which ends the run, and returns it. ctx
// bounds each save; it must outlive done (the final save runs after a shutdown).
func (p *Pipeline) saveLoop(ctx context.Context, done <-chan struct{}, stop context.CancelCauseFunc) error {
	interval := p.cfg.CheckpointInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	var saved uint64
	var fails saveFailures
	save := func(force bool) error {
		if p.halted.Load() {
			return nil // a halted run never saves: its position is no longer its to write
		}
		c, version, txns, err := p.tracker.snapshotTxns()
		if err != nil {
			return err
		}
		if version == saved && !force {
			return nil
		}
		// The tracker's set only ever holds transactions whose events, and all earlier
		// transactions' events, were acknowledged: saving anything newer could lose
		// messages on a crash.
		if err := p.writeCheckpoint(ctx, &c); err != nil {
			return err
		}
		saved = version
		p.saved(c, txns)
		return nil
	}
	for {
		select {
		case <-done:
			return fails.final(save(true))
		case <-timer.C:
		}
		err := save(false)
		var se *saveError
		switch {
		case err == nil:
			if fails.n > 0 {
				p.saveRecovered(&fails)
				p.gate.set(true)
			}
			timer.Reset(interval)
		case !errors.As(err, &se):
			stop(err) // the tracker's set could not take a GTID
			return err
		default:
			if fails.n == 0 {
				p.gate.set(false)
			}
			retry := min(interval, maxSaveRetry)
			if err := p.saveFailed(&fails, err, retry); err != nil {
				stop(err)
				return err
			}
			timer.Reset(retry)
		}
	}
}

// writeCheckpoint stamps c with the time and saves it, counting a failure in the metrics. Its
// error is a *saveError.
func (p *Pipeline) writeCheckpoint(ctx context.Context, c *checkpoint.Checkpoint) error {
	c.SavedAt = p.cfg.Now().UTC()
	if err := p.cfg.Saver.Save(ctx, *c); err != nil {
		p.m.CheckpointSaveFailed()
		return &saveError{set: c.GTIDSet, err: err}
	}
	return nil
}

// saved is what follows a successful save of c, which covers the first txns transactions of
// this pipeline.
func (p *Pipeline) saved(c checkpoint.Checkpoint, txns uint64) {
	if cl := p.cfg.Cleanup; cl != nil {
		cl.Saved(txns) // only now: a row is deleted only once a saved checkpoint covers it
	}
	p.m.CheckpointSaved(c.SavedAt, c.CommitTime)
	p.cfg.Logger.Debug().Str("gtid_set", c.GTIDSet).Msg("checkpoint saved")
}

// saveFailures accounts for consecutive failed saves: since when, how many, and when the last
// was logged. The zero value is no failure. Owned by the one goroutine that saves.
type saveFailures struct {
	since, lastLog time.Time
	n              int
}

// saveFailed counts err, a failed save, and logs it (at most every maxSaveRetry) with retry,
// the wait before the next attempt. Once saves have failed for SaveFailureLimit it returns the
// error that ends the run, with what to change; nil before.
func (p *Pipeline) saveFailed(f *saveFailures, err error, retry time.Duration) error {
	now := p.cfg.Now()
	if f.n == 0 {
		f.since = now
	}
	f.n++
	if now.Sub(f.since) >= p.cfg.SaveFailureLimit {
		// The store words the fix: the file store's is its directory, the mysql
		// store's is not.
		fix := checkpoint.Fix(err)
		if fix == "" {
			fix = "fix what the error says"
		}
		return fmt.Errorf("%w; saves have failed since %s (%d attempts), so outboxd stops rather than relay what it cannot checkpoint: "+
			"%s and start it again; what was sent since the last saved checkpoint will be resent",
			err, f.since.Format(time.RFC3339), f.n, fix)
	}
	if f.n == 1 || now.Sub(f.lastLog) >= maxSaveRetry {
		f.lastLog = now
		p.cfg.Logger.Error().Err(err).Str("failing_since", logging.Time(f.since)).Int("failed_attempts", f.n).
			Stringer("retry_in", retry).Stringer("give_up_after", p.cfg.SaveFailureLimit).
			Msg("checkpoint not saved; reading paused, retrying")
	}
	return nil
}

// saveRecovered logs that a save succeeded after f.n failures and resets f.
func (p *Pipeline) saveRecovered(f *saveFailures) {
	p.cfg.Logger.Info().Str("failing_since", logging.Time(f.since)).Int("failed_attempts", f.n).
		Msg("checkpoint saved again; reading resumes")
	f.since, f.n = time.Time{}, 0
}

// final adds to err, the last save's failure, how long saves had been failing before it.
func (f *saveFailures) final(err error) error {
	if se := (*saveError)(nil); errors.As(err, &se) && f.n > 0 {
		return fmt.Errorf("%w (failing since %s, %d attempts)", err, f.since.Format(time.RFC3339), f.n+1)
	}
	return err
}

// saveError is a checkpoint write that failed.
type saveError struct {
	set string
	err error
}

func (e *saveError) Error() string {
	return fmt.Sprintf("%v: save checkpoint %s: %v", ErrCheckpointSave, e.set, e.err)
}

// Unwrap exposes both the sentinel and the Saver's error to errors.Is and errors.As.
func (e *saveError) Unwrap() []error { return []error{ErrCheckpointSave, e.err} }
