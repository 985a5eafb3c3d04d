package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/internal/wait"
)

// Role is what this process does now.
type Role string

// Roles.
const (
	// RoleStandby waits for the lock, ready to lead.
	RoleStandby Role = "standby"
	// RoleLeader holds the lock: it reads the binlog, sends and saves.
	RoleLeader Role = "leader"
	// RoleFenced lost the lock: nothing is read, sent or saved until it stands by again.
	RoleFenced Role = "fenced"
)

// Change is one role change, for the log, /status and the metrics.
type Change struct {
	Role   Role
	Epoch  uint64 // the term's epoch (RoleLeader, RoleFenced); 0 otherwise
	Term   *Term  // the lock's term (RoleLeader, RoleFenced)
	Reason string
}

// Roles is the role loop: stand by until the lock is granted, claim the checkpoint, lead until
// the term ends, and after a fence either stand by again or stop because another holder took
// over. The funcs are the relay; the loop knows nothing of binlogs or sinks.
type Roles struct {
	Elector *Elector
	// Claim makes this process the checkpoint's writer once the lock is granted (it bumps the
	// epoch, checkpoint.Claimer) and returns the epoch. An error wrapping
	// checkpoint.ErrStoreMisconfigured ends Run; any other (unreachable, a lock wait) gives
	// the lock back and competes again.
	Claim func(ctx context.Context) (uint64, error)
	// Lead relays while the term lasts. Its ctx ends when Run's ctx ends (a shutdown: drain and
	// save as always) or when the term is lost, with the term's error as the cause (wrapping
	// ErrFenced: stop at once, save nothing). Lead must return promptly after either.
	Lead func(ctx context.Context, t *Term, epoch uint64) error
	// Superseded is asked after a fence: an error wrapping checkpoint.ErrSuperseded when
	// another holder claimed the checkpoint (Run returns it: this process was replaced), one
	// wrapping checkpoint.ErrUnreachable when the writer cannot tell (asked again, with backoff),
	// nil when the row is still this process's (it stands by and competes again).
	Superseded func(ctx context.Context) error
	// Cooldown is how long a fenced leader waits before it competes again, so that a send it
	// abandoned has ended before anything of its next term is sent (the longest send).
	Cooldown time.Duration
	// OnChange is called at every role change, before the new role's work starts.
	OnChange func(Change)
	Logger   zerolog.Logger
}

// Run runs the loop until ctx ends (nil, after the leader's own drain and save) or an error
// ends it: a Lead error while the term held (a poison row, a misconfigured server), a claim
// that failed for good, or a fence after which another holder owns the checkpoint (wrapping
// checkpoint.ErrSuperseded, with "superseded" in the message).
func (r *Roles) Run(ctx context.Context) error {
	reason := "started"
	for {
		r.change(Change{Role: RoleStandby, Reason: reason})
		t, err := r.Elector.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		epoch, err := r.Claim(ctx)
		if err != nil {
			t.Release()
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, checkpoint.ErrStoreMisconfigured) {
				return fmt.Errorf("claim the checkpoint after taking leader lock %q: %w", r.Elector.LockName(), err)
			}
			// Unreachable, a lock wait or a deadlock: give the lock back and compete again.
			reason = "the checkpoint could not be claimed: " + err.Error()
			if !wait.Sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		// The lock may have been freed under a live leader: the server dropped its lock
		// connection (a KILL, a restart, a reset) and the old leader learns it at its next
		// ping, sending meanwhile. Waiting one ping interval before leading lets it stop first
		// (its saves already fail: the claim moved the epoch). A crash costs the same wait.
		settled := wait.Sleep(ctx, r.Elector.ping)
		if !settled || ctx.Err() != nil {
			// Stopped while claiming (Claim may not watch ctx) or settling: a process that is
			// shutting down does not announce itself leader or start a term; the row's bumped
			// epoch is harmless, the next leader bumps it again.
			t.Release()
			return nil
		}
		r.change(Change{Role: RoleLeader, Epoch: epoch, Term: t, Reason: "lock granted"})
		reported, err := r.lead(ctx, t, epoch)
		fenced := t.Err()
		if ctx.Err() != nil || fenced == nil {
			t.Release()
			if ctx.Err() != nil && fenced != nil {
				// A fence during the shutdown: nothing was saved after it, which the log says.
				r.Logger.Warn().Err(fenced).Msg("the leader lock was lost during the shutdown; the checkpoint was not saved after that")
				return nil
			}
			return err
		}
		if !reported {
			r.change(Change{Role: RoleFenced, Epoch: epoch, Term: t, Reason: fenced.Error()})
		}
		if err != nil && !errors.Is(err, ErrFenced) {
			r.Logger.Info().AnErr("lead_error", err).Msg("the relay stopped after the fence")
		}
		if err := r.checkSuperseded(ctx, epoch); err != nil {
			return err
		}
		if !wait.Sleep(ctx, r.Cooldown) {
			return nil
		}
		reason = "stepped down after a fence: " + fenced.Error()
	}
}

// lead runs Lead with a ctx that the term's loss cancels. The loss is reported (RoleFenced)
// the moment it happens, not when Lead returns: Lead may take a while to wind down (a save
// blocked on a cut-off writer ends at its own timeout) while nothing is sent any more, and
// until then /status, the metrics and the log would still call this process the leader, past
// the standby's takeover. reported says whether it did so.
func (r *Roles) lead(ctx context.Context, t *Term, epoch uint64) (bool, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex
	returned, reported := false, false
	go func() {
		select {
		case <-t.Lost():
			mu.Lock()
			if !returned && ctx.Err() == nil {
				reported = true
				r.change(Change{Role: RoleFenced, Epoch: epoch, Term: t, Reason: t.Err().Error()})
			}
			mu.Unlock()
			cancel(t.Err())
		case <-lctx.Done():
		}
	}()
	err := r.Lead(lctx, t, epoch)
	mu.Lock()
	returned = true
	rep := reported
	mu.Unlock()
	cancel(nil)
	return rep, err
}

// checkSuperseded asks Superseded until the writer answers; it returns the error that ends Run,
// or nil to stand by again (also when ctx ends).
func (r *Roles) checkSuperseded(ctx context.Context, epoch uint64) error {
	retry := wait.Retry{
		Backoff: wait.Backoff{Initial: retryInitial, Max: retryMax},
		Again: func(err error) bool {
			return ctx.Err() == nil && errors.Is(err, checkpoint.ErrUnreachable) && !errors.Is(err, checkpoint.ErrSuperseded)
		},
		OnRetry: func(err error, in time.Duration) {
			r.Logger.Warn().Err(err).Stringer("retry_in", in).Msg("fenced: cannot read the checkpoint row to tell whether another leader took over, retrying")
		},
	}
	err := retry.Do(ctx, func() error { return r.Superseded(ctx) })
	var ended *wait.Ended
	switch {
	case err == nil || ctx.Err() != nil || errors.As(err, &ended):
		return nil
	case errors.Is(err, checkpoint.ErrSuperseded):
		return fmt.Errorf("superseded: this process (holder %s, epoch %d) lost leader lock %q and another holder took over the checkpoint since; "+
			"it stopped without saving anything after the fence (the new leader resends what was not saved): %w",
			r.Elector.Holder(), epoch, r.Elector.LockName(), err)
	}
	return err
}

func (r *Roles) change(c Change) {
	ev := r.Logger.Info()
	if c.Role == RoleFenced {
		ev = r.Logger.Error()
	}
	ev = ev.Str("role", string(c.Role)).Str("lock_name", r.Elector.LockName()).Str("holder", r.Elector.Holder()).Str("reason", c.Reason)
	if c.Epoch > 0 {
		ev = ev.Uint64("epoch", c.Epoch)
	}
	if c.Term != nil {
		ev = ev.Uint64("lock_connection_id", c.Term.ConnID())
	}
	ev.Msg("role changed")
	if r.OnChange != nil {
		r.OnChange(c)
	}
}
