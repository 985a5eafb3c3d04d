package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// The demo, as `make demo` runs it, shows every committed order arriving through Kafka and
// RocketMQ, and the example consumer grants one benefit per paid order.
func TestDemoDeliversEveryOrder(t *testing.T) {
	mariadb.RequireT(t)
	bin := filepath.Join(t.TempDir(), "outboxd")
	build := exec.Command("go", "build", "-o", bin, "../outboxd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := runDemo(ctx, demoOptions{Outboxd: bin, Every: 100 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if res.Ordered < 5 || res.Received < res.Ordered {
		t.Fatalf("ordered %d, received %d\n%s", res.Ordered, res.Received, out.String())
	}
	if res.Paid == 0 || res.Granted != res.Paid || !strings.Contains(out.String(), "benefit | processed") {
		t.Fatalf("%d paid orders, %d benefits granted\n%s", res.Paid, res.Granted, out.String())
	}
	if !strings.Contains(out.String(), "commit→consumer") || !strings.Contains(out.String(), "commit→broker") {
		t.Fatalf("no events shown:\n%s", out.String())
	}
}
