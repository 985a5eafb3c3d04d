package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// SetTarget moves new connections to the new target and leaves open ones where they are.
func TestSetTarget(t *testing.T) {
	live := echo(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	p, err := New(live)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old := dial(t, p.Addr())
	if err := old.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.SetTarget(dead)
	// The proxy accepts and then closes, as its dial of the dead target fails: the client sees
	// that as a failed round trip or, when the reset comes first, a failed connect.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		cl := &client{c: c, r: bufio.NewReader(c)}
		err = cl.roundTrip(2 * time.Second)
		c.Close()
		if err == nil {
			t.Fatal("a new connection reached the old target after SetTarget")
		}
	}
	if err := old.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("an open connection broke on SetTarget: %v", err)
	}
	p.SetTarget(live)
	if err := dial(t, p.Addr()).roundTrip(2 * time.Second); err != nil {
		t.Fatalf("a new connection after SetTarget back: %v", err)
	}
}
