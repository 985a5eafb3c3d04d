package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Periodic runs follow a durable mark ("every row with created_at before it was checked"),
// kept with the checkpoint (checkpoint.ReconcileMark), and the database's clock: not the
// process's start or its clock, so that a restart, a failed run, a takeover or a failover
// leaves no window unchecked, and a clock that runs ahead of the database's does not carry the
// windows past rows that were not yet written.

// FirstMark is where the periodic reconcile starts when no mark was ever saved: one window
// behind the delay, as the runs before the mark did. Rows created before it are not checked
// periodically (the daemon logs that and the command that checks them). Pure.
func FirstMark(serverNow time.Time, delay, width time.Duration) time.Time {
	return serverNow.Add(-delay - width)
}

// Windows is what a periodic run checks: the last width before serverNow-delay, as the runs
// before the mark did (a window longer than the interval checks each row again at later
// runs), and from the mark when it is earlier (after a restart, a failed run, a takeover),
// cut into back-to-back windows of at most width, oldest first. Each window starts where the
// previous ends, so a mark saved after each one leaves no gap. Pure.
func Windows(mark, serverNow time.Time, delay, width time.Duration) []Window {
	end := serverNow.Add(-delay)
	if width <= 0 {
		return nil
	}
	start := end.Add(-width)
	if mark.Before(start) {
		start = mark
	}
	var ws []Window
	for t := start; t.Before(end); {
		u := end
		if end.Sub(t) > width {
			u = t.Add(width)
		}
		ws = append(ws, Window{Since: t, Until: u})
		t = u
	}
	return ws
}

// ServerNow is the database's clock, NOW(6) as an instant, read on db: the clock created_at is
// written by (DEFAULT CURRENT_TIMESTAMP). It blocks on one query.
func ServerNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var s string
	if err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&s); err != nil {
		return time.Time{}, fmt.Errorf("reconcile: read the server's clock: %w", err)
	}
	t, err := parseUnix(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("reconcile: read the server's clock: %q: %w", s, err)
	}
	return t, nil
}
