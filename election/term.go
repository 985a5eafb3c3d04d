package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Term is one stretch of holding the lock. While the lease is proven Check returns nil; once
// it is not, Lost is closed, Err says why, and Check fails for good. Safe for concurrent use.
type Term struct {
	e      *Elector
	conn   *sql.Conn
	connID uint64
	began  time.Time

	mu     sync.Mutex
	proven time.Time // send time of the last ping the server confirmed (monotonic)
	err    error     // why the term ended; nil while held
	lost   chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func newTerm(e *Elector, conn *sql.Conn, id uint64, proven time.Time) *Term {
	t := &Term{e: e, conn: conn, connID: id, began: proven, proven: proven,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go t.watch()
	return t
}

// ConnID is the server's id of the lock connection (what `KILL` takes).
func (t *Term) ConnID() uint64 { return t.connID }

// Began is when the lock was granted.
func (t *Term) Began() time.Time { return t.began }

// Lost is closed when the term ended: the lease passed without proof, or the lock connection
// failed, or Release was called.
func (t *Term) Lost() <-chan struct{} { return t.lost }

// Err says why the term ended (wrapping ErrFenced); nil while it lasts.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Check returns nil while the lock is proven: the server confirmed it on a ping sent less than
// a lease ago. Otherwise it returns an error wrapping ErrFenced, and ends the term. It reads the
// monotonic clock, so a process that was paused (SIGSTOP, a frozen VM) fails it the moment it
// runs again, before any ping. It takes a lock and no I/O: cheap enough for every send.
func (t *Term) Check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if age := time.Since(t.proven); age >= t.e.cfg.Lease {
		t.endLocked(fmt.Errorf("%w: the lock was last proven %s ago, longer than ha.lease %s", ErrFenced, age.Round(time.Millisecond), t.e.cfg.Lease))
		return t.err
	}
	return nil
}

func (t *Term) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLocked(err)
}

func (t *Term) endLocked(err error) {
	if t.err != nil {
		return
	}
	t.err = err
	close(t.lost)
}

// watch pings the lock every ping interval, each ping bounded by the end of the lease, until
// the term ends; then it closes the lock connection.
func (t *Term) watch() {
	defer close(t.done)
	defer t.conn.Close()
	tick := time.NewTicker(t.e.ping)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			t.releaseLock()
			return
		case <-t.lost:
			return
		case <-tick.C:
		}
		if t.Check() != nil {
			return
		}
		t.mu.Lock()
		deadline := t.proven.Add(t.e.cfg.Lease)
		t.mu.Unlock()
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var mine sql.NullBool
		err := t.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", t.e.cfg.LockName).Scan(&mine)
		cancel()
		select {
		case <-t.stop:
			t.releaseLock()
			return // released meanwhile: the error is ours
		default:
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.end(fmt.Errorf("%w: no answer from %s on the lock connection within ha.lease %s", ErrFenced, t.e.cfg.Addr, t.e.cfg.Lease))
			return
		case err != nil:
			t.end(fmt.Errorf("%w: the lock connection to %s failed: %w", ErrFenced, t.e.cfg.Addr, err))
			return
		case !mine.Valid || !mine.Bool:
			t.end(fmt.Errorf("%w: %s says lock %q is no longer held by this connection", ErrFenced, t.e.cfg.Addr, t.e.cfg.LockName))
			return
		}
		t.mu.Lock()
		if t.err == nil {
			t.proven = sent
		}
		t.mu.Unlock()
	}
}

// releaseLock frees the lock on the server at once (RELEASE_LOCK) before the connection
// closes: a closed connection frees it only once the server has noticed the disconnect, and a
// standby waiting in GET_LOCK then takes over that much later. It waits at most a second; a
// server that does not answer frees the lock when it notices the connection gone.
func (t *Term) releaseLock() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = t.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", t.e.cfg.LockName)
}

// Release ends the term: it stops the pings and closes the lock connection, which frees the
// lock on the server (a server that is away frees it when it notices the connection gone). It
// blocks while a ping is in flight, at most until the lease ends. Releasing twice is a no-op.
func (t *Term) Release() {
	t.stopOnce.Do(func() {
		close(t.stop)
		<-t.done // the watcher returns and closes the connection
	})
	t.end(fmt.Errorf("%w: released", ErrFenced))
}
