package binlog

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// go-mysql enforces its ReadTimeout by setting a read deadline before every packet (two or three
// times per binlog event: the header, each copied chunk, onStream's own), and each SetReadDeadline
// costs a clock read and a runtime timer update: 10% of outboxd's CPU in a 1-row catch-up. So the
// syncer gets no ReadTimeout and its connections are wrapped in an idleConn instead: a Read
// blocked for longer than the timeout fails with the same "i/o timeout" as go-mysql's deadline,
// which still covers every phase (handshake, queries, the dump, the KILL connection of Close).
// Reads only bump a counter; a watchdog goroutine per connection checks it four times per
// timeout, so a stall is noticed after 1 to 1.25 times the timeout.

// idleDialer returns a dialer for go-mysql whose connections fail a Read that blocks for longer
// than timeout.
func idleDialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newIdleConn(c, timeout), nil
	}
}

type idleConn struct {
	net.Conn
	timeout time.Duration
	// seq counts Reads started; reading is set while one blocks.
	seq     atomic.Uint64
	reading atomic.Bool
	// tripped is the seq of the Read the watchdog expired (the real deadline was set in the
	// past for it); a timeout seen by a later Read is the watchdog's race with a Read that
	// ended just then, not a stall.
	tripped atomic.Uint64
	// ownDeadline: the caller set a read deadline of its own (go-mysql's Close does), whose
	// timeouts are always real.
	ownDeadline atomic.Bool
	deadlineMu  sync.Mutex // orders undoTrip with the caller's own deadlines
	stop        chan struct{}
	closeOnce   sync.Once
}

func newIdleConn(c net.Conn, timeout time.Duration) *idleConn {
	ic := &idleConn{Conn: c, timeout: timeout, stop: make(chan struct{})}
	go ic.watch()
	return ic
}

// pastDeadline is a deadline already passed, to make a blocked Read return.
var pastDeadline = time.Unix(1, 0)

func (c *idleConn) watch() {
	tick := max(c.timeout/4, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var last uint64
	var idle time.Duration
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		s := c.seq.Load()
		if !c.reading.Load() || s != last {
			last, idle = s, 0
			continue
		}
		if idle += tick; idle >= c.timeout {
			c.tripped.Store(s)
			_ = c.Conn.SetReadDeadline(pastDeadline)
			idle = 0
		}
	}
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		s := c.seq.Add(1)
		c.reading.Store(true)
		n, err := c.Conn.Read(b)
		c.reading.Store(false)
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() && c.tripped.Load() != s && c.undoTrip() {
			// The watchdog expired an earlier Read that returned just before: undone.
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// undoTrip clears the deadline the watchdog set, unless the caller has a deadline of its own
// (then the timeout is real); it reports whether it cleared it. Under deadlineMu, so a
// caller's deadline set meanwhile is not wiped.
func (c *idleConn) undoTrip() bool {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	if c.ownDeadline.Load() {
		return false
	}
	_ = c.Conn.SetReadDeadline(time.Time{})
	return true
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	c.ownDeadline.Store(!t.IsZero())
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	c.ownDeadline.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) Close() error {
	c.closeOnce.Do(func() { close(c.stop) })
	return c.Conn.Close()
}
