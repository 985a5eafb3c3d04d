package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// SIGHUP is logged and ignored; the first SIGTERM ends the context; a second exits at once
// with exitForced.
func TestSignalsHangupShutdownAndForce(t *testing.T) {
	var out syncBuf
	exited := make(chan int, 1)
	s := newSignals(&out, func(code int) { exited <- code })
	go s.loop()
	defer s.stop()

	s.ch <- syscall.SIGHUP
	waitFor(t, func() bool { return strings.Contains(out.String(), "SIGHUP ignored") })
	if s.ctx.Err() != nil {
		t.Fatal("SIGHUP ended the run")
	}
	s.ch <- syscall.SIGTERM
	select {
	case <-s.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not end the run's context")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first SIGTERM exited with %d", code)
	case <-time.After(50 * time.Millisecond):
	}
	s.ch <- os.Interrupt
	select {
	case code := <-exited:
		if code != exitForced {
			t.Fatalf("forced exit code %d, want %d", code, exitForced)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not force the exit")
	}
	if !strings.Contains(out.String(), `"signal":"SIGINT"`) || !strings.Contains(out.String(), "exiting at once") {
		t.Fatalf("log lacks the forced exit:\n%s", out.String())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The same signal again within sameSignalWindow of the first is the same stop; after it, or
// another signal at once, forces the exit.
func TestSignalsSameSignalWindow(t *testing.T) {
	for _, c := range []struct {
		name   string
		second os.Signal
		after  time.Duration
		forced bool
	}{
		{"same signal at once", syscall.SIGTERM, time.Millisecond, false},
		{"same signal just inside the window", syscall.SIGTERM, sameSignalWindow - time.Millisecond, false},
		{"same signal after the window", syscall.SIGTERM, sameSignalWindow, true},
		{"another signal at once", os.Interrupt, time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out syncBuf
			exited := make(chan int, 1)
			s := newSignals(&out, func(code int) { exited <- code })
			var mu sync.Mutex
			now := time.Unix(1000, 0)
			s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			go s.loop()
			defer s.stop()
			s.ch <- syscall.SIGTERM
			<-s.ctx.Done()
			mu.Lock()
			now = now.Add(c.after)
			mu.Unlock()
			s.ch <- c.second
			s.ch <- syscall.SIGHUP // a marker: once it is logged, the second signal was handled
			waitFor(t, func() bool { return strings.Contains(out.String(), "SIGHUP ignored") || len(exited) > 0 })
			select {
			case code := <-exited:
				if !c.forced || code != exitForced {
					t.Fatalf("exit %d, forced %v", code, c.forced)
				}
			default:
				if c.forced {
					t.Fatal("the second signal did not force the exit")
				}
			}
		})
	}
}
