package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Two in-process relays on one ha config (so `go test -race` sees the role loop, the relay
// reused across terms, the saver's guard and the admin side together), with rows flowing while
// the leader's lock connection is KILLed: the first kill hands the lead to the standby and the
// old leader, whose row the standby claimed, exits with "superseded"; the later kills, with no
// standby left, fence the survivor, which stands by after its cooldown and leads again in the
// same process. Every committed row arrives, in per-key order of first arrival.
func TestHAKilledLockConnectionsWhileRowsFlow(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	haCfg(t, w, &o, "ha-churn")
	a := startRelay(t, o, daemon.Options{})
	b := startRelay(t, o, daemon.Options{})
	root, err := sql.Open("mysql", "root@tcp("+srv.Addr+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	lock := lockNameOf(o, "ha-churn")
	holder := func(within time.Duration, not uint64) uint64 {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			id, held, err := election.LockHolder(context.Background(), root, lock)
			if err != nil {
				t.Fatal(err)
			}
			if held && id != not {
				return id
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no new holder of %s within %s", lock, within)
		return 0
	}
	var committed []string
	n := 0
	commitFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			id := fmt.Sprintf("ev%04d", n)
			w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", n%5), Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
			n++
			time.Sleep(5 * time.Millisecond)
		}
	}
	leader := holder(20*time.Second, 0)
	commitFor(time.Second)
	if _, err := root.Exec("KILL ?", leader); err != nil {
		t.Fatal(err)
	}
	commitFor(300 * time.Millisecond)
	leader = holder(5*time.Second, leader) // the standby, at once
	var survivor *relay
	select {
	case err := <-a.done:
		close(a.done)
		survivor = b
		if err == nil || !strings.Contains(err.Error(), "superseded") {
			t.Errorf("the old leader stopped with %v, want superseded", err)
		}
	case err := <-b.done:
		close(b.done)
		survivor = a
		if err == nil || !strings.Contains(err.Error(), "superseded") {
			t.Errorf("the old leader stopped with %v, want superseded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old leader went on running after the standby claimed its row")
	}
	for range 3 {
		commitFor(time.Second)
		if _, err := root.Exec("KILL ?", leader); err != nil {
			t.Fatal(err)
		}
		commitFor(300 * time.Millisecond)
		// No standby: the survivor fences, waits its cooldown (the sink's 2 s timeout) and
		// takes the lock again.
		leader = holder(10*time.Second, leader)
		commitFor(500 * time.Millisecond)
	}
	c := newConsumer(t, kc, "t")
	c.waitForEvent(committed[len(committed)-1], 30*time.Second)
	checkPerKeyOrder(t, c.settle(500*time.Millisecond), committed)
	if err := survivor.stop(t); err != nil {
		t.Errorf("the survivor's stop: %v", err)
	}
	t.Logf("%d rows over 4 kills", len(committed))
}

// Without ha, every process claims the mysql store's row at start: the newest wins. The older
// one, still running, stops at its next save with "superseded" (halted: it sends nothing more),
// and the newer one delivers everything from the checkpoint on.
func TestNoHANewestProcessSupersedesTheOlder(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	useMySQLStore(w, &o, "noha")
	old := startRelay(t, o, daemon.Options{})
	var committed []string
	commit := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("ev%03d", i)
			w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%3), Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
		}
	}
	commit(0, 20)
	c := newConsumer(t, kc, "t")
	c.waitForEvent("ev019", 20*time.Second)
	o2 := o
	o2.ServerID = 0 // a replica id of its own, as a second instance on another host would have
	newer := startRelay(t, o2, daemon.Options{})
	time.Sleep(2 * time.Second) // the newer one claimed the row and streams
	commit(20, 40)
	select {
	case err := <-old.done:
		close(old.done)
		if err == nil || !strings.Contains(err.Error(), "superseded") {
			t.Fatalf("the older process stopped with %v, want superseded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the older process went on after the newer claimed the row")
	}
	c.waitForEvent("ev039", 20*time.Second)
	checkPerKeyOrder(t, c.settle(500*time.Millisecond), committed)
	if err := newer.stop(t); err != nil {
		t.Errorf("the newer process's stop: %v", err)
	}
}
