package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// haCfg is o with ha on, the mysql store and a short lease, for two processes on one config.
func haCfg(t *testing.T, w *world, o *cfgOpts, name string) string {
	t.Helper()
	table := useMySQLStore(w, o, name)
	o.Extra += "ha: {enabled: true, lease: 2s}\nadmin: {listen: off}\n"
	return table
}

// waitLog waits until p's output holds every part of want on one line.
func waitLog(t *testing.T, p *proc, timeout time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(p.output(), "\n") {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %s:\n%s", want, timeout, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leads(p *proc) bool { return strings.Contains(p.output(), `"role":"leader"`) }

// Two processes on one config: one leads, the other stands by; kill -9 of the leader hands
// over to the standby and every committed row arrives in per-key order.
func TestHATwoProcessesOneLeads(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	haCfg(t, w, &o, "ha-smoke")
	cfgPath := writeCfg(t, o)

	a := startBinary(t, "run", "--config", cfgPath)
	waitLog(t, a, 20*time.Second, `"role":"leader"`, `"epoch":1`)
	b := startBinary(t, "run", "--config", cfgPath)
	waitLog(t, b, 20*time.Second, `"role":"standby"`)
	var committed []string
	for i := range 50 {
		id := fmt.Sprintf("ev%03d", i)
		w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%5), Topic: "t", Payload: []byte(id)})
		committed = append(committed, id)
	}
	c := newConsumer(t, kc, "t")
	c.waitFor(50, 30*time.Second)
	if leads(b) {
		t.Fatalf("the standby led while the leader ran:\n%s", b.output())
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitLog(t, b, 15*time.Second, `"role":"leader"`, `"epoch":2`)
	t.Logf("takeover after %s", time.Since(killed))
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("takeover took %s", d)
	}
	for i := 50; i < 100; i++ {
		id := fmt.Sprintf("ev%03d", i)
		w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%5), Topic: "t", Payload: []byte(id)})
		committed = append(committed, id)
	}
	c.waitForEvent("ev099", 30*time.Second)
	checkPerKeyOrder(t, c.settle(500*time.Millisecond), committed)
}

// A read-only writer (a replica, by mistake) is named by check and refused by run with ha:
// the lock would be that server's alone, so instances pointed at different replicas would
// all lead. root has SUPER, so nothing else would fail.
func TestHAReadOnlyWriterRefused(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	haCfg(t, w, &o, "ha-ro")
	cfgPath := writeCfg(t, o)
	w.exec("SET GLOBAL read_only = 1")
	defer w.exec("SET GLOBAL read_only = 0")

	code, out := runBinary(t, "check", "--config", cfgPath)
	if code == 0 || !strings.Contains(out, "checkpoint_writer") || !strings.Contains(out, "writable primary") {
		t.Fatalf("check exited %d without naming the read-only writer:\n%s", code, out)
	}
	code, out = runBinary(t, "run", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "read-only") || !strings.Contains(out, "checkpoint.writer_addr") {
		t.Fatalf("run exited %d, want 1 naming the read-only writer:\n%s", code, out)
	}
}
