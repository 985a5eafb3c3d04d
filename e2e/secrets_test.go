package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Secrets never leave the process: a run with the MySQL password in a *_file setting and a
// SCRAM password from the environment delivers through SASL, and neither password appears in
// any log line (at debug level), in /status, in /metrics, or in `outboxd check` output.
func TestSecretsNeverPrinted(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	const dbPass = "db-Pw-7f3c9e1a-leakcheck"
	const saslPass = "sasl-Pw-b41d22c8-leakcheck"
	w.exec("CREATE USER 'leakcheck'@'%' IDENTIFIED BY '" + dbPass + "'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'leakcheck'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'leakcheck'@'%'")
	t.Cleanup(func() { w.exec("DROP USER 'leakcheck'@'%'") })

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "relay", saslPass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "mysql-password")
	if err := os.WriteFile(pwFile, []byte(dbPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := admFreeAddr(t)
	cfg := fmt.Sprintf(`source:
  flavor: mariadb
  addr: %s
  user: leakcheck
  password_file: %s
  server_id: %d
  start: %q
tables: [{table: %s.outbox_event}]
sinks:
  main:
    type: kafka
    brokers: [%q]
    sasl: {mechanism: SCRAM-SHA-512, username: relay, password: "${OUTBOXD_E2E_SASL_PASSWORD}"}
routes: [{sink: main, topic: t}]
checkpoint: {path: %s, interval: 200ms}
admin: {listen: %q}
log: {level: debug, format: json}
`, w.srv.Addr, pwFile, 1000+int(serverIDs.Add(1)), w.position(), w.schema, kc.ListenAddrs()[0],
		filepath.Join(dir, "checkpoint.json"), admin)
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTBOXD_E2E_SASL_PASSWORD", saslPass) // inherited by the child processes

	code, checkOut := runBinary(t, "check", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("check exited %d:\n%s", code, checkOut)
	}
	p := startBinary(t, "run", "--config", cfgPath)
	admWaitReady(t, admin, 200, 30*time.Second)
	w.commit(row{EventID: "secret-1", Key: "k", Topic: "t", Payload: []byte("x")})

	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SASL(scram.Auth{User: "relay", Pass: saslPass}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := false
	for !got && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = got || header(r, "event_id") == "secret-1" })
	}
	if !got {
		t.Fatalf("the row did not arrive through SASL; output:\n%s", p.output())
	}

	_, status := admGet(admin, "/status")
	_, metrics := admGet(admin, "/metrics")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("outboxd exit %d:\n%s", code, p.output())
	}
	for name, text := range map[string]string{"logs": p.output(), "/status": status, "/metrics": metrics, "check output": checkOut} {
		if text == "" {
			t.Fatalf("%s is empty: nothing was checked", name)
		}
		for _, secret := range []string{dbPass, saslPass} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains a password", name)
			}
		}
	}
}
