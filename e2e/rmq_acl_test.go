package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// rmqACLSink is a rocketmq sink signing with ak and the secret read from a file in dir.
func rmqACLSink(t *testing.T, c *rocketmq.Cluster, dir, ak, secret string) string {
	t.Helper()
	path := filepath.Join(dir, "rmq-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("{type: rocketmq, nameservers: [%q], access_key: %s, secret_key_file: %q, send_timeout: 1s}",
		c.NameServer(), ak, path)
}

// With ACL on the broker, the right credentials deliver; a wrong secret is an ACL error that
// is retried (not poison): nothing is stored, the checkpoint stays before the row, and the
// logs say ACL without quoting the secret.
func TestRMQACL(t *testing.T) {
	const ak, secret, wrong = "outboxd-ak", "s3cret-right-7f2c", "s3cret-WRONG-91ab"
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"T"}, ACL: &rocketmq.ACL{AccessKey: ak, SecretKey: secret}})
	routes := "  - sink: rmq\n    topic: T\n"

	good := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Routes: routes,
	}
	good.Sinks = map[string]string{"rmq": rmqACLSink(t, rc, good.Dir, ak, secret)}
	r1 := startRelay(t, good, daemon.Options{})
	g1 := w.commit(row{EventID: "acl-ok", Key: "k", Topic: "t", Payload: []byte("ok")})
	if ms := waitRMQ(t, rc, "T", 1, 20*time.Second); ms[0].Keys != "acl-ok" || string(ms[0].Body) != "ok" {
		t.Fatalf("stored %q body %q, want acl-ok", ms[0].Keys, ms[0].Body)
	}
	waitCheckpoint(t, good.Dir, g1, 10*time.Second)
	if err := r1.stop(t); err != nil {
		t.Fatalf("good relay: %v", err)
	}

	bad := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Routes: routes,
	}
	bad.Sinks = map[string]string{"rmq": rmqACLSink(t, rc, bad.Dir, ak, wrong)}
	r2 := startRelay(t, bad, daemon.Options{})
	w.commit(row{EventID: "acl-bad", Key: "k", Topic: "t", Payload: []byte("bad")})
	time.Sleep(3 * time.Second)
	for _, m := range rc.Messages("T") {
		if m.Keys == "acl-bad" {
			t.Fatal("a relay with the wrong secret delivered acl-bad")
		}
	}
	select {
	case err := <-r2.done:
		r2.done <- err // put back for the cleanup's stop
		t.Fatalf("relay with a wrong secret exited (%v): an ACL error must be retried, not fatal\n%s", err, r2.logText())
	default:
	}
	// Stopped before reading its logs (the buffer is written under a lock this test cannot
	// take) and its checkpoint (a graceful stop saves one last time).
	if err := r2.stop(t); err != nil {
		t.Logf("relay with a wrong secret stopped with: %v", err)
	}
	// A relay that never acknowledged anything saves no checkpoint, or one before the row.
	if cp := readCheckpoint(t, bad.Dir); cp != "" && cp != bad.Start {
		t.Fatalf("checkpoint moved to %s (start %s) without a delivery", cp, bad.Start)
	}
	logs := r2.logText()
	if strings.Contains(logs, wrong) || strings.Contains(logs, secret) {
		t.Fatalf("logs quote a secret:\n%s", logs)
	}
	aclLine := ""
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warn"`) {
			if strings.Contains(line, "ACL") && strings.Contains(line, ak) {
				aclLine = line
				break
			}
		}
	}
	if aclLine == "" {
		t.Fatalf("no warn/error log line names ACL and access key %s:\n%s", ak, logs)
	}
	if strings.Contains(aclLine, "poison") || strings.Contains(aclLine, "dead") {
		t.Fatalf("ACL error handled as poison: %s", aclLine)
	}
}
