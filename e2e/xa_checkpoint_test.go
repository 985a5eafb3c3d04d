package e2e

import (
	"syscall"
	"testing"
	"time"
)

// An XA committed while a transaction between its XA PREPARE and its XA COMMIT waits (here
// for a missing topic): its rows are acknowledged first, and the checkpoint must still not
// land on the prepare, or the next start reads the XA COMMIT without its rows and stops. After
// kill -9 and the topic's creation, a restart delivers the waiting row and checkpoints the end.
func TestXACheckpointWaitsForTheXACommit(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.MissingTopicTimeout = "2m"
	cfgPath := writeCfg(t, o)
	c := newConsumer(t, kc, "t")

	p := startBinary(t, "run", "--config", cfgPath)
	first := w.commit(row{EventID: "a0", Key: "k", Topic: "t", Payload: []byte("a0")})
	c.waitForEvent("a0", 30*time.Second)
	waitCheckpoint(t, o.Dir, first, 10*time.Second)
	pinned := xaPrepare(w, "'pc1'", "pc1a")
	w.commit(row{EventID: "b1", Key: "other", Topic: "late", Payload: []byte("b1")}) // waits for its topic
	w.exec("XA COMMIT 'pc1'")
	c.waitForEvent("pc1a", 30*time.Second)
	time.Sleep(2500 * time.Millisecond) // checkpoint.interval is 1s: a save would have happened
	if got := readCheckpoint(t, o.Dir); got != pinned {
		t.Fatalf("checkpoint %q while b1 (between the XA PREPARE and its XA COMMIT) is unacknowledged, want %q (before the prepare)", got, pinned)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)

	createKafkaTopic(t, kc, "late")
	late := newConsumer(t, kc, "late")
	p = startBinary(t, "run", "--config", cfgPath)
	late.waitForEvent("b1", 30*time.Second)
	last := w.commit(row{EventID: "a1", Key: "k", Topic: "t", Payload: []byte("a1")})
	c.waitForEvent("a1", 30*time.Second)
	waitCheckpoint(t, o.Dir, last, 10*time.Second)
	checkPerKeyOrder(t, c.settle(500*time.Millisecond), []string{"a0", "pc1a", "a1"})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.output())
	}
}
