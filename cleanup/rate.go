package cleanup

import (
	"context"
	"time"
)

// limiter spaces deletes so that no more than perSecond rows go per second on average, with a
// burst of at most one batch. Owned by one goroutine.
type limiter struct {
	perSecond int
	next      time.Time
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) bool
}

// wait blocks until rows more rows may be deleted; it returns false when ctx ends first.
func (l *limiter) wait(ctx context.Context, rows int) bool {
	now := l.now()
	if l.next.Before(now) {
		l.next = now
	}
	d := l.next.Sub(now)
	l.next = l.next.Add(time.Duration(float64(rows) / float64(l.perSecond) * float64(time.Second)))
	if d <= 0 {
		return ctx.Err() == nil
	}
	return l.sleep(ctx, d)
}
