package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/admin"
)

// Tests of the run's lifecycle with the built binary: what is saved before the first
// acknowledgement, at every stop, when the checkpoint cannot be written, and how signals act.

// lcCfg is simpleCfg with start: latest (the default) and an admin address of its own.
func lcCfg(t *testing.T, w *world, brokers string) (cfgOpts, string) {
	t.Helper()
	adminAddr := admFreeAddr(t)
	o := cfgOpts{
		Srv: w.srv, Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s}", brokers)},
		Routes: "  - sink: main\n    topic: \"{topic}\"\n",
		Dir:    t.TempDir(),
		Extra:  fmt.Sprintf("admin: {listen: %q}\n", adminAddr),
	}
	return o, adminAddr
}

// stop sends SIGTERM and expects a clean exit (0) within 30 s.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; output:\n%s", code, p.output())
	}
}

// lcStart runs outboxd on cfg and waits until the start position (the server's, for
// latest) is saved: from then on no committed row is skipped.
func lcStart(t *testing.T, w *world, o cfgOpts, cfg string) (string, *proc) {
	t.Helper()
	pos := w.position()
	p := startBinary(t, "run", "--config", cfg)
	waitCheckpoint(t, o.Dir, pos, 30*time.Second)
	return pos, p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %s: %v", sig, err)
	}
}

// waitLog waits until the output holds s.
func (p *proc) waitLog(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within %s; output:\n%s", s, timeout, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Item 1, latest and no traffic: the start position is the checkpoint before anything
// streams and after the SIGTERM, so a row committed while outboxd is down is delivered on the
// next start (before, no checkpoint was written and latest skipped it).
func TestLatestStartIsSavedWithoutTraffic(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o, _ := lcCfg(t, w, kc.ListenAddrs()[0])
	cfg := writeCfg(t, o)
	pos, p := lcStart(t, w, o, cfg)
	p.waitLog(t, "start position saved as the checkpoint", 5*time.Second)
	p.stop(t)
	if got := readCheckpoint(t, o.Dir); got != pos {
		t.Fatalf("checkpoint after a stop with no traffic %q, want the server's position %q", got, pos)
	}

	g := w.commit(row{EventID: "while-down", Key: "k", Topic: "t", Payload: []byte("x")})
	p2 := startBinary(t, "run", "--config", cfg)
	c := newConsumer(t, kc, "t")
	c.waitForEvent("while-down", 30*time.Second)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p2.stop(t)
	if ids := eventIDs(c.settle(300 * time.Millisecond)); len(ids) != 1 {
		t.Fatalf("delivered %v, want while-down once", ids)
	}
}

// Item 1, broker unreachable on the first run: the row read then is never acknowledged; the
// drain times out, the checkpoint stays at the start, and the next start, with the broker up,
// delivers it.
func TestUnreachableBrokerOnFirstRunLosesNothing(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	brokerAddr := admFreeAddr(t) // nothing listens there yet
	o, _ := lcCfg(t, w, brokerAddr)
	cfg := writeCfg(t, o)
	pos, p := lcStart(t, w, o, cfg)
	g := w.commit(row{EventID: "unsent", Key: "k", Topic: "t", Payload: []byte("x")})
	p.waitLog(t, `"gtid":"`+g+`"`, 20*time.Second) // read, and failing to send
	p.signal(t, syscall.SIGTERM)
	// The drain waits for the broker for up to 30 s, then gives up on the send.
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "they will be resent on the next start") {
		t.Fatalf("no drain-timeout line; output:\n%s", p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != pos {
		t.Fatalf("checkpoint %q, want the start %q (the row was never acknowledged)", got, pos)
	}

	kc := kafkaOn(t, brokerAddr, kfake.SeedTopics(3, "t"))
	p2 := startBinary(t, "run", "--config", cfg)
	c := newConsumer(t, kc, "t")
	c.waitForEvent("unsent", 30*time.Second)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p2.stop(t)
}

// Item 1, the very first row is poison under on_poison: stop: outboxd exits 1 with the
// checkpoint at the start, and a restart with --dead-letter-event delivers it (as a dead
// letter) and what follows it.
func TestPoisonFirstRowKeepsTheStart(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.x", "outbox.dead_letter")
	o, _ := lcCfg(t, w, kc.ListenAddrs()[0])
	o.Routes = "  - match: {topic: \"order.*\"}\n    sink: main\n    topic: \"{topic}\"\n"
	o.OnPoison = "stop"
	o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
	cfg := writeCfg(t, o)
	pos, p := lcStart(t, w, o, cfg)
	w.commit(row{EventID: "poison", Key: "k", Topic: "nowhere", Payload: []byte("x")})
	g := w.commit(row{EventID: "after", Key: "k", Topic: "order.x", Payload: []byte("y")})
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit %d on a poison row, want 1; output:\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "--dead-letter-event poison") {
		t.Fatalf("the error does not name the way out; output:\n%s", p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != pos {
		t.Fatalf("checkpoint %q after the poison stop, want the start %q", got, pos)
	}

	p2 := startBinary(t, "run", "--config", cfg, "--dead-letter-event", "poison")
	dl := newConsumer(t, kc, "outbox.dead_letter")
	dl.waitForEvent("poison", 30*time.Second)
	c := newConsumer(t, kc, "order.x")
	c.waitForEvent("after", 30*time.Second)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p2.stop(t)
}

// Item 5: with the checkpoint directory immutable, the failure is logged and counted at once,
// reading pauses, /status keeps reporting the checkpoint that is on disk, and outboxd stops
// within the 30 s bound with an error saying what to fix. After the fix nothing is missing.
func TestUnwritableCheckpointStopsWithinTheBound(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o, adminAddr := lcCfg(t, w, kc.ListenAddrs()[0])
	cfg := writeCfg(t, o)

	_, p := lcStart(t, w, o, cfg)
	g1 := w.commit(row{EventID: "saved", Key: "k", Topic: "t", Payload: []byte("1")})
	waitCheckpoint(t, o.Dir, g1, 30*time.Second)

	if out, err := exec.Command("chattr", "+i", o.Dir).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s (needs root and ext4/xfs): %v: %s", o.Dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", o.Dir).Run() })
	failedAt := time.Now()
	g2 := w.commit(row{EventID: "unsaved", Key: "k", Topic: "t", Payload: []byte("2")})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("unsaved", 20*time.Second) // delivered, but its checkpoint cannot be written
	p.waitLog(t, "checkpoint not saved; reading paused, retrying", 10*time.Second)

	vals, _ := admScrape(t, adminAddr)
	if vals["outboxd_checkpoint_save_failures_total"] < 1 {
		t.Fatalf("outboxd_checkpoint_save_failures_total = %v after a failed save", vals["outboxd_checkpoint_save_failures_total"])
	}
	code, body := admGet(adminAddr, "/status")
	if code != 200 {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st admin.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.CheckpointGTIDSet != g1 || st.AckedGTIDSet != g2 || st.CheckpointSaveError == "" {
		t.Fatalf("/status checkpoint %q, acked %q, save error %q; want the saved %s, the acknowledged %s and the error",
			st.CheckpointGTIDSet, st.AckedGTIDSet, st.CheckpointSaveError, g1, g2)
	}
	code2, text := runBinary(t, "status", "--config", cfg)
	if code2 != 0 || !strings.Contains(text, "checkpoint   "+g1) || !strings.Contains(text, "NOT SAVING since") {
		t.Fatalf("outboxd status exit %d:\n%s", code2, text)
	}

	// Reading is paused: a row committed now is not delivered while saves fail.
	w.commit(row{EventID: "paused", Key: "k", Topic: "t", Payload: []byte("3")})
	if code := p.wait(t, 60*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, p.output())
	}
	if d := time.Since(failedAt); d > 45*time.Second {
		t.Fatalf("stopped %s after the directory became unwritable, want within the 30 s bound", d)
	}
	out := p.output()
	if !strings.Contains(out, "outboxd stopped with an error") || !strings.Contains(out, "make the checkpoint's directory writable") {
		t.Fatalf("no clear error at the stop; output:\n%s", out)
	}
	// The last words name the checkpoint on disk, and the acknowledged set apart.
	if want := fmt.Sprintf(`"gtid_set":%q,"acked_gtid_set":%q`, g1, g2); !strings.Contains(out, want) {
		t.Fatalf("no %s in the output:\n%s", want, out)
	}
	for _, id := range eventIDs(c.settle(300 * time.Millisecond)) {
		if id == "paused" {
			t.Fatal("a row committed while saves failed was read and delivered: reading was not paused")
		}
	}
	if got := readCheckpoint(t, o.Dir); got != g1 {
		t.Fatalf("checkpoint on disk %q, want %q", got, g1)
	}

	// Fixed: the restart resends from the saved checkpoint, so nothing is missing.
	if out, err := exec.Command("chattr", "-i", o.Dir).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	p2 := startBinary(t, "run", "--config", cfg)
	c.waitForEvent("paused", 30*time.Second)
	p2.stop(t)
}

// Item 10, SIGHUP: logged and ignored; the relay goes on, and a later SIGTERM drains and
// saves, so the restart sends nothing twice.
func TestSIGHUPIsIgnored(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o, _ := lcCfg(t, w, kc.ListenAddrs()[0])
	cfg := writeCfg(t, o)

	_, p := lcStart(t, w, o, cfg) // started: latest no longer skips a row
	g := w.commit(row{EventID: "before-hup", Key: "k", Topic: "t", Payload: []byte("1")})
	waitCheckpoint(t, o.Dir, g, 30*time.Second)
	p.signal(t, syscall.SIGHUP)
	p.waitLog(t, "SIGHUP ignored", 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if !p.running() {
		t.Fatalf("SIGHUP stopped outboxd; output:\n%s", p.output())
	}
	g = w.commit(row{EventID: "after-hup", Key: "k", Topic: "t", Payload: []byte("2")})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("after-hup", 20*time.Second)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p.stop(t)

	p2 := startBinary(t, "run", "--config", cfg)
	g = w.commit(row{EventID: "after-restart", Key: "k", Topic: "t", Payload: []byte("3")})
	waitCheckpoint(t, o.Dir, g, 30*time.Second)
	p2.stop(t)
	if ids := strings.Join(eventIDs(c.settle(500*time.Millisecond)), " "); ids != "before-hup after-hup after-restart" {
		t.Fatalf("delivered %q, want each row once, in order", ids)
	}
}

// Item 10, a SIGTERM while outboxd retries an unreachable source at start-up is a requested
// shutdown: exit 0, not the connection error.
func TestSIGTERMDuringStartupRetriesExitsZero(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o, _ := lcCfg(t, w, kc.ListenAddrs()[0])
	o.Addr = admFreeAddr(t) // a closed loopback port
	cfg := writeCfg(t, o)

	p := startBinary(t, "run", "--config", cfg)
	p.waitLog(t, "source not reachable at start, retrying", 20*time.Second)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM during start-up, want 0; output:\n%s", code, p.output())
	}
	if out := p.output(); !strings.Contains(out, "stopped during start-up") || strings.Contains(out, "stopped with an error") {
		t.Fatalf("output:\n%s", out)
	}
}

// Item 10, a second SIGTERM during a drain that waits for an unreachable broker exits at
// once with code 3; the checkpoint stays at the start, so the restart delivers the row.
func TestSecondSIGTERMForcesTheExit(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	brokerAddr := admFreeAddr(t)
	o, _ := lcCfg(t, w, brokerAddr)
	cfg := writeCfg(t, o)
	pos, p := lcStart(t, w, o, cfg)
	g := w.commit(row{EventID: "stuck", Key: "k", Topic: "t", Payload: []byte("x")})
	p.waitLog(t, `"gtid":"`+g+`"`, 20*time.Second)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "send SIGINT or SIGTERM again to exit at once", 5*time.Second)
	time.Sleep(500 * time.Millisecond)
	if !p.running() {
		t.Fatalf("exited before the drain timeout with a send outstanding; output:\n%s", p.output())
	}
	forced := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d after a second SIGTERM, want 3; output:\n%s", code, p.output())
	}
	if d := time.Since(forced); d > 3*time.Second {
		t.Fatalf("forced exit took %s", d)
	}
	if !strings.Contains(p.output(), "second signal: exiting at once") {
		t.Fatalf("no log line for the forced exit; output:\n%s", p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != pos {
		t.Fatalf("checkpoint %q, want the start %q", got, pos)
	}

	kc := kafkaOn(t, brokerAddr, kfake.SeedTopics(3, "t"))
	p2 := startBinary(t, "run", "--config", cfg)
	newConsumer(t, kc, "t").waitForEvent("stuck", 30*time.Second)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p2.stop(t)
}
