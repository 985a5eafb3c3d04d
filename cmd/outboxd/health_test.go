package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/admin"
)

// healthCode runs `outboxd health args...` through dispatch and returns its exit code and
// stdout+stderr.
func healthCode(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	err := dispatch(context.Background(), nil, append([]string{"health"}, args...), &out, &out)
	if err == nil {
		return 0, out.String()
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		t.Fatalf("health %v: error without an exit code: %v", args, err)
	}
	return ee.code, out.String() + err.Error()
}

// The health subcommand against outboxd's real admin server: /healthz 200 exits 0, /readyz 503
// with --ready exits 1 and shows what is not ready, nothing listening exits 1, --help exits 0.
func TestHealthAgainstAdminServer(t *testing.T) {
	var notReady atomic.Value
	notReady.Store([]string{"sink rmq: NameServer unreachable"})
	srv, err := admin.Listen(admin.Config{
		Listen:   "127.0.0.1:0",
		Gatherer: prometheus.NewRegistry(),
		Status:   func(context.Context) admin.Status { return admin.Status{} },
		Ready:    func(context.Context) []string { return notReady.Load().([]string) },
		Logger:   zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	var stopErr error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			stopErr, stopped = <-served, true
		}
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	addr := srv.Addr()
	_, port, _ := net.SplitHostPort(addr)

	if code, out := healthCode(t, "--addr", addr); code != 0 || !strings.Contains(out, "/healthz: 200") {
		t.Errorf("health on a serving admin server: exit %d, want 0\n%s", code, out)
	}
	// admin.listen's wildcard form, as in the compose config, is probed on loopback.
	if code, out := healthCode(t, "--addr", "0.0.0.0:"+port); code != 0 {
		t.Errorf("health --addr 0.0.0.0:%s: exit %d, want 0\n%s", port, code, out)
	}
	code, out := healthCode(t, "--addr", addr, "--ready")
	if code != 1 || !strings.Contains(out, "503") || !strings.Contains(out, "NameServer unreachable") {
		t.Errorf("health --ready while not ready: exit %d, want 1 with the 503 and its reason\n%s", code, out)
	}
	notReady.Store([]string(nil))
	if code, out := healthCode(t, "--addr", addr, "--ready"); code != 0 || !strings.Contains(out, "/readyz: 200") {
		t.Errorf("health --ready when ready: exit %d, want 0\n%s", code, out)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, out := healthCode(t, "--addr", addr, "--timeout", "2s"); code != 1 || !strings.Contains(out, "is outboxd running") {
		t.Errorf("health with nothing listening: exit %d, want 1\n%s", code, out)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("health with nothing listening took %s", d)
	}
}

func TestHealthUsage(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		err := dispatch(context.Background(), nil, []string{"health", arg}, &stdout, &stderr)
		if err != nil || !strings.HasPrefix(stdout.String(), "Usage: outboxd health") {
			t.Errorf("health %s: err %v, stdout %q; want usage on stdout and exit 0", arg, err, stdout.String())
		}
	}
	// Usage errors exit 2, apart from the probe's 1.
	for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--addr", "no-port"}} {
		if code, out := healthCode(t, args...); code != 2 {
			t.Errorf("health %v: exit %d, want 2\n%s", args, code, out)
		}
	}
}
