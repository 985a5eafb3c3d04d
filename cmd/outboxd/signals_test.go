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
