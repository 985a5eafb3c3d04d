package cleanup

import (
	"context"
	"errors"
	"fmt"
)

// NotPrimary is the error Config.Writer returns when the writer is no writable primary (it
// turned into a replica, or read-only, in a failover): every write of cleanup there (a DELETE)
// would be a transaction of the replica's own, which breaks its
// replication (gtid_strict_mode) or, worse, diverges it silently.
type NotPrimary struct {
	// Reason is the outboxd_cleanup_stopped label: read_only, replica or unverified.
	Reason string
	// Problem says what was found and what to change.
	Problem string
}

func (e *NotPrimary) Error() string { return e.Problem }

// writable reports whether cleanup may write to the writer now. It runs Config.Writer (one
// batch of queries), so callers ask once per round, not per statement. Once the writer was
// found to be no primary, cleanup stays stopped for the rest of the process, with an error
// logged once and outboxd_cleanup_stopped{reason} at 1: nothing more is deleted while the
// relay goes on (an operator should look at a failover that moved the writer, rather than
// cleanup following it on its own). A restart runs the preflight
// again, which refuses the writer or finds it a primary again. A failed check (the
// connection) is returned: the round writes nothing and is retried. Safe for concurrent use.
func (c *Cleaner) writable(ctx context.Context) (bool, error) {
	if c.stopped.Load() != nil {
		return false, nil
	}
	if c.cfg.Writer == nil {
		return true, nil
	}
	err := c.cfg.Writer(ctx)
	var np *NotPrimary
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &np):
		if c.stopped.CompareAndSwap(nil, np) {
			c.cfg.Metrics.SetCleanupStopped(np.Reason)
			c.cfg.Logger.Error().Str("reason", np.Reason).Str("problem", np.Problem).
				Msg("cleanup stopped: the writer is no writable primary any more; nothing more is deleted there until outboxd restarts (the relay goes on); point checkpoint.writer_addr at the primary")
		}
		return false, nil
	default:
		return false, err
	}
}

// Stopped returns why cleanup stopped (nil while it runs). Safe for concurrent use.
func (c *Cleaner) Stopped() *NotPrimary { return c.stopped.Load() }

// roundWrites is writable for a loop's round: a failed check is reported like a failed
// statement.
func (c *Cleaner) roundWrites(ctx context.Context, report func(error)) bool {
	ok, err := c.writable(ctx)
	if err != nil {
		report(fmt.Errorf("verify the cleanup writer is a writable primary: %w", err))
	}
	return ok
}
