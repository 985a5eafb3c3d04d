package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// The demo, as `make demo` runs it, shows every committed order arriving through Kafka and
// RocketMQ, and the example consumer grants one benefit per paid order.
func TestDemoDeliversEveryOrder(t *testing.T) {
	mariadb.RequireT(t)
	bin := buildOutboxd(t)
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

func buildOutboxd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxd")
	build := exec.Command("go", "build", "-o", bin, "../outboxd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// output returns a writer for the demo's output and a func that reads it so far, safe to call
// while the demo writes.
func output() (*syncWriter, func() string) {
	var b strings.Builder
	w := &syncWriter{w: &b}
	return w, func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return b.String()
	}
}

// The demo prints how to insert a row of one's own: a mariadb command line and an INSERT
// that, run as printed, arrive as the line the demo says to look for.
func TestDemoShowsHowToInsertYourOwnRow(t *testing.T) {
	mariadb.RequireT(t)
	if _, err := exec.LookPath("mariadb"); err != nil {
		t.Fatalf("the mariadb client ships with mariadb-server: %v", err)
	}
	bin := buildOutboxd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, text := output()
	done := make(chan error, 1)
	go func() {
		_, err := runDemo(ctx, demoOptions{Outboxd: bin, Every: time.Hour, Out: out})
		done <- err
	}()
	howto := regexp.MustCompile(`(?m)^demo    \|   (mariadb .*)\n.*and paste:\ndemo    \|   (INSERT .*)\n`)
	var m []string
	for m == nil {
		select {
		case err := <-done:
			t.Fatalf("demo ended before printing how to insert a row: %v\n%s", err, text())
		case <-time.After(50 * time.Millisecond):
			m = howto.FindStringSubmatch(text())
		}
	}
	args := strings.Fields(m[1])
	cli := exec.CommandContext(ctx, args[0], args[1:]...)
	cli.Stdin = strings.NewReader(m[2] + "\n")
	if b, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("%s < %q: %v\n%s", m[1], m[2], err, b)
	}
	arrived := regexp.MustCompile(`(?m)^rocketmq\| ORDER_CREATED .* key=me `)
	for !arrived.MatchString(text()) {
		select {
		case err := <-done:
			t.Fatalf("demo ended before the row arrived: %v\n%s", err, text())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, text())
	}
}
