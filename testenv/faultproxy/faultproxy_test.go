package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and waits up to d for the echo; it returns the error, if any.
func (c *client) roundTrip(d time.Duration) error {
	_ = c.c.SetDeadline(time.Now().Add(d))
	if _, err := c.c.Write([]byte("ping\n")); err != nil {
		return err
	}
	l, err := c.r.ReadString('\n')
	if err == nil && l != "ping\n" {
		panic("bad echo " + l)
	}
	return err
}

func TestModes(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	a := dial(t, p.Addr())
	if err := a.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}

	// Latency delays each chunk in each direction.
	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if err := a.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("latency: %v", err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("latency 100ms each way, round trip took %s", el)
	}
	p.SetLatency(0)

	// DropNew: new connections are reset, the open one still works.
	p.SetMode(DropNew)
	// The reset may come before the dial returns (ECONNRESET from connect) or after it.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		b := &client{c: c, r: bufio.NewReader(c)}
		err := b.roundTrip(2 * time.Second)
		c.Close()
		if err == nil {
			t.Fatal("drop_new: a new connection worked")
		}
	}
	if err := a.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("drop_new: the open connection broke: %v", err)
	}
	p.SetMode(Pass)

	// ResetAll breaks the open connection; a new one works.
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	if err := a.roundTrip(2 * time.Second); err == nil {
		t.Fatal("reset: the connection still worked")
	}
	c := dial(t, p.Addr())
	if err := c.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("after reset: %v", err)
	}

	// Blackhole: the open and a new connection get no answer; leaving it resets them and new
	// connections work again.
	p.SetMode(Blackhole)
	d := dial(t, p.Addr()) // accepted: the dial succeeds
	if err := c.roundTrip(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("blackhole, open conn: %v, want a timeout", err)
	}
	if err := d.roundTrip(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("blackhole, new conn: %v, want a timeout", err)
	}
	p.SetMode(Pass)
	time.Sleep(50 * time.Millisecond)
	if err := c.roundTrip(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("after blackhole, old conn: %v, want a reset", err)
	}
	e := dial(t, p.Addr())
	if err := e.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("after blackhole, new conn: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if p.Conns() != 0 {
		t.Fatalf("%d connections after Close", p.Conns())
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A black hole does not pass on a close either: the client closing a blackholed connection
// leaves the server's side open (a cut link hides the FIN) until the mode leaves Blackhole.
func TestBlackholeHidesClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	defer s.Close()
	p.SetMode(Blackhole)
	c.Close()
	_ = s.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := s.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("the server side saw %v while blackholed, want nothing (a timeout)", err)
	}
	p.SetMode(Pass)
	_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("after the black hole the server side saw %v, want the connection ended", err)
	}
}
