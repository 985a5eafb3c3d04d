package wait

import (
	"context"
	"time"
)

// Backoff is an exponential wait between tries: Initial first, doubled after each wait up to
// Max. The zero value is not usable; set Initial and Max. Not safe for concurrent use: one loop
// owns it.
type Backoff struct {
	Initial, Max time.Duration
	// Sleep waits d, false when ctx ended first; nil is the package's Sleep. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) bool
	next  time.Duration
}

// Next is how long the next Wait waits (for the log line before it).
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Initial
	}
	return b.next
}

// Wait blocks for Next, then doubles it up to Max. It returns false, at once, when ctx ends
// first (the wait is not doubled then).
func (b *Backoff) Wait(ctx context.Context) bool {
	sleep := b.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	if !sleep(ctx, b.Next()) {
		return false
	}
	b.next = min(2*b.next, b.Max)
	return true
}

// Reset starts the backoff over at Initial, after progress.
func (b *Backoff) Reset() { b.next = b.Initial }

// Retry is the shape every retry loop of the daemon shares: try, and on an error Again accepts,
// report it (OnRetry) and wait the backoff before trying again.
type Retry struct {
	Backoff
	// Again reports whether err is worth another try (a connection that failed, a writer away);
	// nil retries every error. It may look at ctx to stop on a shutdown before the log line.
	Again func(err error) bool
	// OnRetry is called once per failed try that is retried, before the wait, with the error
	// and the wait ahead: the loop's log line. nil logs nothing.
	OnRetry func(err error, wait time.Duration)
}

// Ended is Do's error when ctx ended during a wait. It reads and unwraps as the last try's
// error, so a caller that does not care why the retries stopped returns it as that error.
type Ended struct{ Last error }

func (e *Ended) Error() string { return e.Last.Error() }
func (e *Ended) Unwrap() error { return e.Last }

// Do calls try until it returns nil (Do returns nil), an error Again rejects (Do returns it as
// is), or ctx ends during a wait (Do returns *Ended with the last error). It blocks for the
// waits; r is copied, so one Retry value may start several loops.
func (r Retry) Do(ctx context.Context, try func() error) error {
	b := r.Backoff
	for {
		err := try()
		if err == nil || (r.Again != nil && !r.Again(err)) {
			return err
		}
		if r.OnRetry != nil {
			r.OnRetry(err, b.Next())
		}
		if !b.Wait(ctx) {
			return &Ended{Last: err}
		}
	}
}
