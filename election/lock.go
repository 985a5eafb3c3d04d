// Package election decides which outboxd of several with one config does the work: each
// competes for a named lock (GET_LOCK) on the writable primary, on a connection of its own; the
// holder leads (reads the binlog, sends, saves the checkpoint) and the others wait as hot
// standbys. The holder proves it still holds the lock by pinging it; when it cannot prove that
// for its lease it fences itself (Term.Lost), and the role loop (Roles.Run) stops it from
// reading, sending and saving.
//
// The timeouts depend on each other. A leader cut off from the server without a FIN keeps the
// lock on the server until the server drops its idle connection (wait_timeout, IdleTimeout),
// while the leader itself gives up at the end of its lease. For "the old leader sends nothing
// once a new one leads" to hold, the server must drop the lock later than the old leader fenced
// plus the longest send it may still have in flight:
//
//	IdleTimeout > Lease + LongestSend
//
// Timeouts derives IdleTimeout that way. When the server frees the lock of a live leader (its
// lock connection is killed or reset, the server restarts), the old leader learns it at its
// next ping, so a new leader waits one ping interval before it leads. The takeover time this
// implies: after a crash (the kernel closes the socket, the server frees the lock at once) a
// standby leads within its GET_LOCK wait plus one ping interval plus its start-up queries;
// after a network cut, within IdleTimeout plus that.
package election

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/wait"
)

// ErrFenced is wrapped by Term.Err and Term.Check once this process can no longer prove it holds
// the lock: it must not read, send or save from then on.
var ErrFenced = errors.New("leader lock lost (fenced)")

// Config configures an Elector.
type Config struct {
	// DB is a pool of its own to the writable primary; the elector takes one connection of it
	// at a time and sets it to keep no idle connections, so a lock connection is never reused.
	// The caller closes it.
	DB *sql.DB
	// Addr names the server in messages.
	Addr string
	// LockName is the GET_LOCK name (at most 64 characters).
	LockName string
	// Holder is this process's unique id (NewHolderID).
	Holder string
	// Lease is how long the holder goes on without proof that it holds the lock.
	Lease time.Duration
	// LongestSend is the longest one send request of any sink may take; IdleTimeout exceeds
	// Lease by it (see the package comment).
	LongestSend time.Duration
	Logger      zerolog.Logger
}

// Timeouts returns the interval between the holder's pings and the server-side idle timeout of
// the lock connection, derived from the lease and the longest send: ping often enough that a
// lock connection killed on the server is noticed within half a second, and let the server keep
// an idle lock connection longer than the lease plus the longest send, plus a margin for clock
// granularity (wait_timeout counts whole seconds). Pure.
func Timeouts(lease, longestSend time.Duration) (ping, idle time.Duration) {
	ping = min(lease/4, 500*time.Millisecond)
	idle = time.Duration(math.Ceil((lease + longestSend + 2*time.Second).Seconds())) * time.Second
	return ping, idle
}

// Takeover returns the longest a standby may need to lead after the leader was cut off without
// a FIN (the server frees the lock after idle, the standby's GET_LOCK wait returns within
// acquireWait), start-up queries aside. Pure.
func Takeover(lease, longestSend time.Duration) time.Duration {
	ping, idle := Timeouts(lease, longestSend)
	return idle + acquireWait + ping // a new leader settles one ping interval (Roles.Run)
}

// acquireWait is how long one GET_LOCK waits on the server before the standby asks again (and
// looks at its ctx).
const acquireWait = time.Second

// NewHolderID returns an id unique to this process: host name, pid and random bytes (two
// processes on two hosts may share a pid, a restarted pod keeps its host name).
func NewHolderID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Elector competes for the lock. Safe for concurrent use.
type Elector struct {
	cfg          Config
	ping, idle   time.Duration
	mu           sync.Mutex
	waitErr      error // the last failure to reach the server while waiting; nil once it answered
	waitErrSince time.Time
}

// New returns an Elector; it does not connect.
func New(cfg Config) (*Elector, error) {
	if cfg.DB == nil || cfg.LockName == "" || cfg.Holder == "" || cfg.Lease <= 0 {
		return nil, fmt.Errorf("election: needs a pool, a lock name, a holder and a lease (got lock %q, holder %q, lease %s)", cfg.LockName, cfg.Holder, cfg.Lease)
	}
	if len(cfg.LockName) > 64 {
		return nil, fmt.Errorf("election: lock name %q is longer than 64 characters", cfg.LockName)
	}
	cfg.DB.SetMaxIdleConns(0)
	e := &Elector{cfg: cfg}
	e.ping, e.idle = Timeouts(cfg.Lease, cfg.LongestSend)
	return e, nil
}

// LockName is the lock competed for.
func (e *Elector) LockName() string { return e.cfg.LockName }

// Holder is this process's id.
func (e *Elector) Holder() string { return e.cfg.Holder }

// WaitError is the last failure to reach the server while waiting for the lock, nil when the
// wait goes on normally (or nothing waits).
func (e *Elector) WaitError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waitErr
}

func (e *Elector) setWaitErr(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil && e.waitErr == nil {
		e.waitErrSince = time.Now()
	}
	e.waitErr = err
}

// Acquire blocks until this process holds the lock and returns the Term, or until ctx ends
// (ctx.Err()). A server that cannot be reached is waited for with backoff (logged, and
// reported by WaitError), never returned: a standby waits for as long as it runs, and a wait
// killed on the server is simply waited again.
func (e *Elector) Acquire(ctx context.Context) (*Term, error) {
	log := e.cfg.Logger
	var t *Term
	r := wait.Retry{
		Backoff: wait.Backoff{Initial: retryInitial, Max: retryMax},
		Again:   func(error) bool { return ctx.Err() == nil },
		OnRetry: func(err error, in time.Duration) {
			e.setWaitErr(err)
			log.Warn().Err(err).Stringer("retry_in", in).Str("lock_name", e.cfg.LockName).Msg("cannot wait for the leader lock: writer not reachable, retrying")
		},
	}
	_ = r.Do(ctx, func() (err error) {
		t, err = e.tryAcquire(ctx)
		if t != nil {
			return nil
		}
		if err == nil {
			err = ctx.Err() // tryAcquire's (nil, nil): ctx ended
		}
		return err
	})
	if t == nil {
		return nil, ctx.Err()
	}
	e.setWaitErr(nil)
	return t, nil
}

// The backoff between tries while the writer cannot be reached: the daemon's reconnect backoff.
const (
	retryInitial = time.Second
	retryMax     = 10 * time.Second
)

// nullPause is how long a standby waits before it asks again after GET_LOCK returned NULL, so
// a max_statement_time that kills every wait at once does not make it spin.
const nullPause = 100 * time.Millisecond

// tryAcquire takes a connection, sets its idle timeout and waits on GET_LOCK until it is granted
// (a Term) or the connection fails (an error) or ctx ends (nil, nil).
func (e *Elector) tryAcquire(ctx context.Context) (*Term, error) {
	conn, err := e.cfg.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("leader lock on %s: connect: %w", e.cfg.Addr, err)
	}
	keep := false
	defer func() {
		if !keep {
			conn.Close() // closed, not pooled: the pool keeps no idle connections (New)
		}
	}()
	// A standby's connection idles too: the same timeout, so a standby cut off leaves nothing
	// behind on the server either.
	sctx, cancel := context.WithTimeout(ctx, acquireWait+10*time.Second) // as each GET_LOCK: a connection cut off right after its dial must not hold the standby
	_, err = conn.ExecContext(sctx, fmt.Sprintf("SET SESSION wait_timeout = %d", int(e.idle.Seconds())))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("leader lock on %s: set the lock connection's wait_timeout: %w", e.cfg.Addr, err)
	}
	e.setWaitErr(nil)
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, acquireWait+10*time.Second)
		var got sql.NullInt64
		err := conn.QueryRowContext(qctx, "SELECT GET_LOCK(?, ?)", e.cfg.LockName, int(acquireWait.Seconds())).Scan(&got)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, fmt.Errorf("leader lock on %s: GET_LOCK(%q): %w", e.cfg.Addr, e.cfg.LockName, err)
		}
		if !got.Valid {
			// The wait was killed on the server (KILL QUERY, a max_statement_time shorter than
			// the wait): the connection is fine and the lock not ours. Wait again; ending the
			// standby here would leave no one to take over.
			e.cfg.Logger.Debug().Str("lock_name", e.cfg.LockName).Msg("GET_LOCK returned NULL (the wait was killed on the server); waiting again")
			if !wait.Sleep(ctx, nullPause) {
				return nil, nil
			}
			continue
		}
		if got.Int64 == 1 {
			// The first proof is this query's send time, as for every ping (Term.watch): the
			// server answered it, and started the idle timer that would free a cut-off
			// leader's lock, no earlier than that. Its answer arrives later, by up to a round
			// trip that a slow link makes long. Bounded by the lease: a link that slow leaves
			// nothing to lead with.
			sent := time.Now()
			idctx, cancel := context.WithTimeout(ctx, e.cfg.Lease)
			var id uint64
			err := conn.QueryRowContext(idctx, "SELECT CONNECTION_ID()").Scan(&id)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil
				}
				return nil, fmt.Errorf("leader lock on %s: connection id: %w", e.cfg.Addr, err)
			}
			keep = true
			return newTerm(e, conn, id, sent), nil
		}
	}
	return nil, nil
}

// LockHolder reports whether some connection holds lock name on db's server, and which
// (IS_USED_LOCK). It blocks on one query. Named locks are not replicated: ask the primary.
func LockHolder(ctx context.Context, db *sql.DB, name string) (connID uint64, held bool, err error) {
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		return 0, false, fmt.Errorf("IS_USED_LOCK(%q): %w", name, err)
	}
	return uint64(id.Int64), id.Valid, nil
}
