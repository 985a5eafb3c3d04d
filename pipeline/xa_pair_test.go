package pipeline

import (
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
)

// A prepared XA's rows acknowledged while a transaction between its XA PREPARE and its XA
// COMMIT is not: the checkpoint must not land on the prepare. From there a restart would read
// the XA COMMIT without its XA PREPARE (an XAUnknownError), and the only way on it offers
// (a position that includes the commit) would skip the unacknowledged transaction.
func TestXACheckpointNeverBetweenPrepareAndCommit(t *testing.T) {
	var missing sync.Map
	missing.Store("late", true)
	s, saver := &memSink{fail: missingTopics(&missing)}, &memSaver{}
	p := newTestPipeline(t, s, saver, PoisonStop)
	p.cfg.MissingTopicWait = time.Minute
	r := startStepwise(t, p)
	r.send(txn(1, "a:1"), xaTxn(2, binlog.XAPrepare, "x1", "b:2"), txn(3, "c:3@late"),
		xaTxn(4, binlog.XACommit, "x1"))
	waitStored(t, s, "t/2")
	deadline := time.Now().Add(5 * time.Second)
	for ev, _ := p.InFlight(); ev != 1 && time.Now().Before(deadline); ev, _ = p.InFlight() {
		time.Sleep(time.Millisecond)
	}
	if got := checkpointOf(t, p); got != "0-1-1" {
		t.Fatalf("checkpoint %q with 0-1-3 unacknowledged between XA PREPARE 0-1-2 and its XA COMMIT 0-1-4, want 0-1-1", got)
	}
	if got := p.Acked().String(); got != "0-1-1" {
		t.Fatalf("Acked %q, want 0-1-1", got)
	}
	missing.Delete("late")
	r.send(txn(5, "a:5"))
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	if got := saver.last(); got != "0-1-5" {
		t.Fatalf("checkpoint %q, want 0-1-5", got)
	}
	if n := p.AckedTransactions(); n != 5 {
		t.Fatalf("%d transactions counted acknowledged, want 5", n)
	}
}
