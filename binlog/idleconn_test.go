package binlog

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// idlePair dials a loopback listener through idleDialer and returns the wrapped client side and
// the server side.
func idlePair(t *testing.T, timeout time.Duration) (client net.Conn, server net.Conn) {
	t.Helper()
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
		close(accepted)
	}()
	client, err = idleDialer(timeout)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A Read that gets nothing fails like go-mysql's own read deadline ("i/o timeout", a net.Error
// with Timeout), after the timeout and within the watchdog's granularity.
func TestIdleConnSilentReadTimesOut(t *testing.T) {
	const timeout = 400 * time.Millisecond
	c, _ := idlePair(t, timeout)
	began := time.Now()
	_, err := c.Read(make([]byte, 16))
	took := time.Since(began)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "i/o timeout") {
		t.Fatalf("Read on a silent connection: %v, want an i/o timeout", err)
	}
	if took < timeout || took > timeout*5/4+300*time.Millisecond {
		t.Errorf("timed out after %s, want between %s and about %s", took, timeout, timeout*5/4)
	}
}

// Data arriving more often than the timeout keeps the connection alive however long it lasts;
// the watchdog's expiry of a Read that had just finished does not fail the next one.
func TestIdleConnLiveStreamDoesNotTimeOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	c, srv := idlePair(t, timeout)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			// Gaps of half the timeout (a loaded machine stretches them), and bursts, so Reads
			// end at every point of a tick.
			gap := timeout / 2
			if i%3 == 0 {
				gap = time.Millisecond
			}
			select {
			case <-stop:
				return
			case <-time.After(gap):
			}
			if _, err := srv.Write([]byte{byte(i)}); err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * timeout)
	buf := make([]byte, 1)
	for n := 0; time.Now().Before(deadline); n++ {
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("read %d on a live connection: %v", n, err)
		}
	}
}

// A deadline the caller sets itself (go-mysql's Close sets one to unblock its reader) is kept
// and its timeout returned, not mistaken for the watchdog's.
func TestIdleConnCallerDeadline(t *testing.T) {
	c, _ := idlePair(t, time.Hour)
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read after the caller's deadline: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller's deadline did not end the Read")
	}
}
