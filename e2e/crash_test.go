package e2e

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/daemon"
)

// kill -9 of the built binary after sends but before the checkpoint caught up, then a restart:
// every committed row arrives at least once, per key in commit order, and the only duplicates
// are events of transactions after the checkpoint saved before the crash.
func TestCrashAndRestartLosesNothing(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Interval = "300ms"
	cfgPath := writeCfg(t, o)

	p := startBinary(t, "run", "--config", cfgPath)
	var committed []string
	gtidOf := map[string]string{}
	commitN := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("ev%04d", i)
			g := w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%7), Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
			gtidOf[id] = g
		}
	}
	commitN(0, 150)
	c := newConsumer(t, kc, "t")
	c.waitFor(150, 30*time.Second)
	waitCheckpoint(t, o.Dir, gtidOf["ev0149"], 10*time.Second)
	commitN(150, 300) // sent, partly acknowledged, not yet checkpointed when the crash comes
	c.waitFor(160, 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	saved := readCheckpoint(t, o.Dir)
	t.Logf("checkpoint at the crash: %q; received before restart: %d", saved, len(c.got))
	if saved == "" {
		t.Fatal("no checkpoint saved before the crash")
	}
	savedSeq := gtidSeq(t, saved)
	if savedSeq < gtidSeq(t, gtidOf["ev0149"]) {
		t.Fatalf("checkpoint %s went backwards", saved)
	}
	commitN(300, 350) // committed while outboxd is down

	p2 := startBinary(t, "run", "--config", cfgPath)
	rs := c.waitFor(len(committed), 60*time.Second)
	c.waitForEvent("ev0349", 30*time.Second)
	rs = c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, committed)

	count := map[string]int{}
	for _, r := range rs {
		count[header(r, "event_id")]++
	}
	dups := 0
	for id, n := range count {
		if n > 1 {
			dups += n - 1
			if gtidSeq(t, gtidOf[id]) <= savedSeq {
				t.Fatalf("event %s (GTID %s) was resent though the checkpoint %s covered it", id, gtidOf[id], saved)
			}
		}
	}
	t.Logf("%d committed, %d received, %d duplicates (all after checkpoint %s)", len(committed), len(rs), dups, saved)

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("graceful stop exited %d:\n%s", code, p2.output())
	}
	// After a graceful stop the checkpoint covers everything delivered.
	if got, want := readCheckpoint(t, o.Dir), gtidOf["ev0349"]; got != want {
		t.Fatalf("checkpoint after SIGTERM %q, want %q", got, want)
	}
}

// The broker goes away (process gone, connections refused) for a while: outboxd retries, the
// checkpoint never passes unacknowledged events, and once the broker is back everything arrives
// in per-key order.
func TestBrokerOutage(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc, port, dataDir := restartableKafka(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	startRelay(t, o, daemon.Options{})

	var committed []string
	gtidOf := map[string]string{}
	commit := func(i int) {
		id := fmt.Sprintf("ev%03d", i)
		gtidOf[id] = w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%5), Topic: "t", Payload: []byte(id)})
		committed = append(committed, id)
	}
	for i := 0; i < 20; i++ {
		commit(i)
	}
	waitCheckpoint(t, o.Dir, gtidOf["ev019"], 20*time.Second)

	kc.Close() // the broker is down
	for i := 20; i < 60; i++ {
		commit(i)
	}
	// For a while outboxd can deliver nothing: the checkpoint must stay where it was.
	time.Sleep(1500 * time.Millisecond)
	if got := readCheckpoint(t, o.Dir); got != gtidOf["ev019"] {
		t.Fatalf("checkpoint moved to %q while the broker was down", got)
	}

	// The broker comes back on the same port with its data.
	kc2 := restartKafka(t, port, dataDir)
	for i := 60; i < 70; i++ {
		commit(i)
	}
	c := newConsumer(t, kc2, "t")
	c.waitForEvent("ev069", 60*time.Second)
	rs := c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, committed)
	waitCheckpoint(t, o.Dir, gtidOf["ev069"], 10*time.Second)
}

func portNum(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// restartableKafka starts a one-broker kfake cluster with topics that stores its data in a
// temporary directory, and returns it with its address and that directory for restartKafka.
// The test closes it (the broker going down).
func restartableKafka(t *testing.T, topics ...string) (kc *kfake.Cluster, addr, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...), kfake.DataDir(dataDir), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	return kc, kc.ListenAddrs()[0], dataDir
}

// restartKafka brings a kfake broker back on the port it had, with the data it stored
// (DataDir), as a broker process restarting would; the port may take a moment to free up.
func restartKafka(t *testing.T, port, dataDir string) *kfake.Cluster {
	t.Helper()
	return kafkaOn(t, port, kfake.DataDir(dataDir), kfake.SyncWrites())
}

// kafkaOn starts a one-broker kfake cluster on the port of addr, waiting for the port to be
// free.
func kafkaOn(t *testing.T, addr string, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(portNum(t, addr))}, opts...)...)
		if err == nil {
			t.Cleanup(c.Close)
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("start kfake on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
