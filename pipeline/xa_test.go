package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
)

func xaTxn(seq int, op binlog.XAOp, gtrid string, events ...string) *binlog.Txn {
	t := txn(seq, events...)
	t.XA = &binlog.XAStep{Op: op, XID: binlog.XID{FormatID: 1, Gtrid: gtrid}}
	if op == binlog.XAPending {
		t.Partial, t.File, t.Pos = true, "", 0
		t.XA.XID = binlog.XID{}
	}
	return t
}

// runStepwise runs p in the background; send feeds it one transaction at a time.
type stepRun struct {
	t    *testing.T
	in   chan *binlog.Txn
	done chan error
}

func startStepwise(t *testing.T, p *Pipeline) *stepRun {
	r := &stepRun{t: t, in: make(chan *binlog.Txn), done: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	go func() { r.done <- p.Run(ctx, r.in) }()
	return r
}

func (r *stepRun) send(txns ...*binlog.Txn) {
	for _, x := range txns {
		select {
		case r.in <- x:
		case err := <-r.done:
			r.t.Fatalf("pipeline stopped before %s: %v", x.GTID, err)
		}
	}
}

func (r *stepRun) finish() error {
	close(r.in)
	return <-r.done
}

func waitStored(t *testing.T, s *memSink, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(" "+sortedIDs(s)+" ", " "+id+" ") {
		if time.Now().After(deadline) {
			t.Fatalf("%s not stored; stored %q", id, sortedIDs(s))
		}
		time.Sleep(time.Millisecond)
	}
}

func checkpointOf(t *testing.T, p *Pipeline) string {
	t.Helper()
	c, _, err := p.tracker.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return c.GTIDSet
}

// A prepared XA's rows wait for its XA COMMIT, then go out after what committed in between (per
// key in commit order); the checkpoint stays before the prepare until then.
func TestXACommitDeliversHeldRowsInCommitOrder(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	r := startStepwise(t, p)
	r.send(txn(1, "a:1"),
		xaTxn(2, binlog.XAPending, "", "a:2"), xaTxn(2, binlog.XAPrepare, "x1", "b:3"),
		txn(3, "a:4"), txn(4))
	waitStored(t, s, "t/4")
	if got := sortedIDs(s); got != "t/1 t/4" {
		t.Fatalf("before XA COMMIT stored %q, want only t/1 t/4", got)
	}
	// t/4 is stored a moment before its acknowledgement reaches the tracker.
	deadline := time.Now().Add(5 * time.Second)
	for ev, _ := p.InFlight(); ev != 2 && time.Now().Before(deadline); ev, _ = p.InFlight() {
		time.Sleep(time.Millisecond)
	}
	if got := checkpointOf(t, p); got != "0-1-1" {
		t.Fatalf("checkpoint %q while x1 is prepared, want 0-1-1 (before the prepare)", got)
	}
	if n, oldest := p.PreparedXA(); n != 1 || oldest.IsZero() {
		t.Fatalf("PreparedXA = %d, %v", n, oldest)
	}
	if ev, _ := p.InFlight(); ev != 2 {
		t.Fatalf("in flight %d events, want the 2 held ones", ev)
	}
	r.send(xaTxn(5, binlog.XACommit, "x1"), txn(6, "b:5"))
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	if got := s.keyOrder("a"); got != "1 4 2" {
		t.Fatalf("key a stored %q, want commit order 1 4 2", got)
	}
	if got := s.keyOrder("b"); got != "3 5" {
		t.Fatalf("key b stored %q, want 3 5", got)
	}
	if got := saver.last(); got != "0-1-6" {
		t.Fatalf("checkpoint %q, want 0-1-6", got)
	}
	if n, _ := p.PreparedXA(); n != 0 {
		t.Fatalf("%d XA still prepared", n)
	}
}

func TestXARollbackSendsNothingAndMovesOn(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	err := runAll(t, p, xaTxn(1, binlog.XAPrepare, "x1", "a:1", "a:2"), txn(2, "b:3"),
		xaTxn(3, binlog.XARollback, "x1"),
		xaTxn(4, binlog.XARollback, "before-start")) // prepared before the start: nothing to send either
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(s); got != "t/3" {
		t.Fatalf("stored %q, want only t/3", got)
	}
	if got := saver.last(); got != "0-1-4" {
		t.Fatalf("checkpoint %q, want 0-1-4", got)
	}
	if ev, b := p.InFlight(); ev != 0 || b != 0 {
		t.Fatalf("rolled-back rows still hold %d events, %d bytes", ev, b)
	}
}

func TestXACommitWithoutPrepareIsAnError(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	err := runAll(t, p, txn(1, "a:1"), xaTxn(2, binlog.XACommit, "jta-42"), txn(3, "a:2"))
	var ue *XAUnknownError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "'jta-42'") || !strings.Contains(err.Error(), "0-1-2") {
		t.Fatalf("err = %v, want an XAUnknownError naming 'jta-42' and its gtid", err)
	}
	if got := saver.last(); got != "0-1-1" {
		t.Fatalf("checkpoint %q, want 0-1-1 (not past the commit)", got)
	}
	if strings.Contains(sortedIDs(s), "t/2") {
		t.Fatal("a transaction after the unknown XA COMMIT was delivered")
	}
}

func TestXAOnePhaseReleasesItsPieces(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	err := runAll(t, p, xaTxn(1, binlog.XAPending, "", "a:1"), xaTxn(1, binlog.XAOnePhase, "op", "a:2"),
		xaTxn(2, binlog.XAOnePhase, "op2", "a:3")) // no pieces: an ordinary transaction
	if err != nil {
		t.Fatal(err)
	}
	if got := s.keyOrder("a"); got != "1 2 3" {
		t.Fatalf("key a stored %q", got)
	}
	if got := saver.last(); got != "0-1-2" {
		t.Fatalf("checkpoint %q", got)
	}
}

// Held rows cannot be freed before a later XA COMMIT: more of them than the capacity stops the
// run with an error naming XA and the settings, instead of stalling the reader for good.
func TestXAHeldRowsBeyondCapacityStop(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	p.tracker.maxEvents = 3
	err := runAll(t, p, txn(1, "a:1"), xaTxn(2, binlog.XAPrepare, "x1", "a:2", "b:3"),
		xaTxn(3, binlog.XAPending, "", "c:4"), xaTxn(3, binlog.XAPrepare, "x2", "d:5"),
		xaTxn(4, binlog.XACommit, "x1"), xaTxn(5, binlog.XACommit, "x2"))
	var ce *XACapacityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "XA") || !strings.Contains(err.Error(), "pipeline.max_inflight_events") ||
		!strings.Contains(err.Error(), "0-1-3") {
		t.Fatalf("err = %v, want an XACapacityError naming pipeline.max_inflight_events and 0-1-3", err)
	}
	if got := saver.last(); got != "0-1-1" {
		t.Fatalf("checkpoint %q, want 0-1-1", got)
	}
}

// Held rows within the capacity never block a later transaction for good, even one larger than
// what is left: it is admitted once nothing else is in flight.
func TestXAHeldRowsDoNotDeadlockLaterTransactions(t *testing.T) {
	s, saver := &memSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	p.tracker.maxEvents = 3
	err := runAll(t, p, xaTxn(1, binlog.XAPrepare, "x1", "a:1", "a:2"),
		txn(2, "b:3", "b:4", "b:5", "b:6"), txn(3, "c:7"), txn(4, "c:8", "c:9"),
		xaTxn(5, binlog.XACommit, "x1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(s); got != "t/1 t/2 t/3 t/4 t/5 t/6 t/7 t/8 t/9" {
		t.Fatalf("stored %q", got)
	}
	if got := saver.last(); got != "0-1-5" {
		t.Fatalf("checkpoint %q", got)
	}
}

func TestXAPreparedTwiceIsAnError(t *testing.T) {
	p := newTestPipeline(t, &memSink{}, &memSaver{}, "")
	err := runAll(t, p, xaTxn(1, binlog.XAPrepare, "x1", "a:1"), xaTxn(2, binlog.XAPrepare, "x1", "a:2"))
	if err == nil || !strings.Contains(err.Error(), "'x1'") || !strings.Contains(err.Error(), "already prepared") {
		t.Fatalf("err = %v", err)
	}
}

// A head held for long (a prepared XA) with many acknowledged transactions behind it: the queue
// stays short, and once the head is acknowledged the checkpoint is exactly what adding each
// transaction would give, with the position of the last one.
func TestTrackerCompactsAcknowledgedEntriesBehindAHeldHead(t *testing.T) {
	for _, c := range []struct {
		flavor gtid.Flavor
		gtid   func(i int) string
		want   string
	}{
		{gtid.MariaDB, func(i int) string { return fmt.Sprintf("0-1-%d", i) }, "0-1-20001,1-1-20000"},
		{gtid.MySQL, func(i int) string { return fmt.Sprintf("3e11fa47-71ca-11e1-9e33-c80aa9429562:%d", i) }, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-20001"},
	} {
		tr := newTracker(gtid.Empty(c.flavor), 100, 1<<20)
		now := time.Unix(1700000000, 0)
		head := tr.begin(c.gtid(1), now, now)
		tr.extend(head, []item{{}})
		var inflightItems []item
		for i := 2; i <= 20001; i++ {
			g := c.gtid(i)
			if c.flavor == gtid.MariaDB && i == 20000 {
				g = "1-1-20000" // another domain
			}
			e := tr.begin(g, now.Add(time.Duration(i)*time.Second), now)
			if i == 10000 { // one transaction stays unacknowledged for a while
				tr.extend(e, []item{{}})
				inflightItems = []item{{entry: e, size: 1}}
			}
			tr.finish(e, "mysql-bin.000002", uint32(i))
			if n := len(tr.queue); n > 2*minCompact+4 {
				t.Fatalf("%s: %d entries queued after %d transactions behind a held head", c.flavor, n, i)
			}
		}
		tr.ack(inflightItems)
		tr.mu.Lock()
		queued := len(tr.queue)
		tr.mu.Unlock()
		if cp, _, _ := tr.snapshot(); cp.GTIDSet != "" {
			t.Fatalf("%s: checkpoint %q moved past the held head", c.flavor, cp.GTIDSet)
		}
		tr.finish(head, "mysql-bin.000001", 1)
		tr.ack([]item{{entry: head, size: 1}})
		cp, _, err := tr.snapshot()
		if err != nil || cp.GTIDSet != c.want || cp.Pos != 20001 || cp.File != "mysql-bin.000002" ||
			!cp.CommitTime.Equal(now.Add(20001*time.Second)) {
			t.Fatalf("%s: checkpoint %+v (%v), want %s at mysql-bin.000002:20001 (queue held %d entries)", c.flavor, cp, err, c.want, queued)
		}
		if n := tr.ackedCount(); n != 20001 || len(tr.queue) != 0 {
			t.Fatalf("%s: %d transactions counted as acknowledged, want 20001; %d still queued", c.flavor, n, len(tr.queue))
		}
	}
}
