package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/kafkatap"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// The verifier must catch what it is there to catch: a lost row, a reordered key, a delivered
// rolled-back row; and it must attribute duplicates to the run after a crash.
func TestVerifyDetects(t *testing.T) {
	t0 := time.Now()
	g := &generator{rows: map[string]*genRow{
		"a1": {Key: "k0", Seq: 1, State: stCommitted},
		"a2": {Key: "k0", Seq: 2, State: stCommitted},
		"a3": {Key: "k0", Seq: 3, State: stCommitted},
		"b1": {Key: "k1", Seq: 1, State: stCommitted},
		"r1": {Key: "k1", Seq: 2, State: stRolledBack},
	}, txns: map[string]int{}}
	truth := map[string]bool{"a1": true, "a2": true, "a3": true, "b1": true}
	epochs := []epoch{{Start: t0}, {Start: t0.Add(10 * time.Second), After: "kill9"}}
	mk := func(off int64, id, key string, seq int, at time.Duration) delivery {
		return delivery{Sink: "kafka", Part: 0, Offset: off, ID: id, Key: key, Seq: seq, Arrived: t0.Add(at)}
	}
	good := deliveries{all: []delivery{
		mk(0, "a1", "k0", 1, time.Second), mk(1, "a2", "k0", 2, time.Second), mk(2, "b1", "k1", 1, time.Second),
		mk(3, "a3", "k0", 3, time.Second),
		mk(4, "a2", "k0", 2, 11*time.Second), mk(5, "a3", "k0", 3, 11*time.Second), // resent after the crash
	}, first: map[string]int{"a1": 0, "a2": 1, "b1": 2, "a3": 3}}
	r := verify(g, truth, nil, good, epochs)
	if !r.OK() || r.Duplicates != 2 || len(r.DuplicatesPerCrash) != 1 || r.DuplicatesPerCrash[0] != 2 || r.MaxDuplicateBurst != 2 {
		t.Fatalf("clean run judged wrong: %+v", r)
	}

	bad := deliveries{all: []delivery{
		mk(0, "a2", "k0", 2, time.Second), mk(1, "a1", "k0", 1, time.Second), // reordered
		mk(2, "r1", "k1", 2, time.Second), // rolled back, delivered
	}, first: map[string]int{"a2": 0, "a1": 1, "r1": 2}}
	r = verify(g, truth, nil, bad, epochs)
	if r.Lost != 2 || r.OrderViolations != 1 || r.RolledBackDelivered != 1 || r.OK() {
		t.Fatalf("bad run: lost %d (want 2: a3, b1), violations %d (want 1), rolled back delivered %d (want 1), ok %v",
			r.Lost, r.OrderViolations, r.RolledBackDelivered, r.OK())
	}

	// A crash failover lost a2 and a3 with the dead primary (committed there only; a2 was
	// delivered before the crash): the database's loss, set apart, not a lost row or a phantom.
	// A committed row in neither the table nor that set is still the database losing a commit.
	delete(truth, "a2")
	delete(truth, "a3")
	crashed := deliveries{all: []delivery{
		mk(0, "a1", "k0", 1, time.Second), mk(1, "a2", "k0", 2, time.Second), mk(2, "b1", "k1", 1, time.Second),
	}, first: map[string]int{"a1": 0, "a2": 1, "b1": 2}}
	r = verify(g, truth, map[string]bool{"a2": true, "a3": true}, crashed, epochs)
	if !r.OK() || r.Lost != 0 || r.Phantoms != 0 || r.RowsDiscarded != 2 || r.DiscardedDelivered != 1 || r.DBLostCommits != 0 {
		t.Fatalf("crash failover judged wrong: %+v", r)
	}
	r = verify(g, truth, map[string]bool{"a2": true}, crashed, epochs)
	if r.OK() || r.DBLostCommits != 1 || r.RowsDiscarded != 1 {
		t.Fatalf("a commit lost outside the failover's set: db lost %d (want 1), discarded %d, ok %v", r.DBLostCommits, r.RowsDiscarded, r.OK())
	}
	if r2 := (Report{MissingReports: 1}); r2.OK() {
		t.Fatal("a missing-GTID report without a crash failover passed")
	}
	if r3 := (Report{MissingReports: 1, CrashFailovers: 1}); !r3.OK() {
		t.Fatal("a missing-GTID report after a crash failover failed the run")
	}
}

// Exactly once, a duplicate fails the run and the verdict says how many the read_committed
// consumer saw; a deposed leader's produce is the broker's to refuse, not a failure. At least
// once, neither holds.
func TestExactlyOnceVerdict(t *testing.T) {
	eo := Report{Delivery: DeliveryExactlyOnce, Instances: 2}
	if !eo.OK() || !strings.Contains(eo.Markdown(), "duplicates seen by a read_committed consumer: 0\n") {
		t.Fatalf("clean exactly-once run: ok %v\n%s", eo.OK(), eo.Markdown())
	}
	eo.StaleProduces = 3
	if !eo.OK() {
		t.Fatal("a deposed leader's produces failed an exactly-once run: the broker fences them")
	}
	eo.Duplicates = 2
	if eo.OK() || !strings.Contains(eo.Markdown(), "duplicates seen by a read_committed consumer: 2\n") {
		t.Fatalf("exactly-once run with 2 duplicates: ok %v\n%s", eo.OK(), eo.Markdown())
	}
	alo := Report{Delivery: DeliveryAtLeastOnce, Duplicates: 2}
	if !alo.OK() || strings.Contains(alo.Markdown(), "read_committed") {
		t.Fatalf("at-least-once run with duplicates: ok %v\n%s", alo.OK(), alo.Markdown())
	}
	if alo.StaleProduces = 1; alo.OK() {
		t.Fatal("a deposed leader's produce passed an at-least-once run")
	}
	if _, err := Run(context.Background(), Options{Delivery: "twice"}); err == nil || !strings.Contains(err.Error(), "exactly_once") {
		t.Fatalf("an unknown delivery mode: %v", err)
	}
}

// The HA figures: a deposed leader's produce forwarded after the next leader (another instance)
// took the lock counts, one before does not, nor one of the same instance's later term; a
// takeover term after a leader fault is a crash for the duplicate attribution.
func TestHAFigures(t *testing.T) {
	t0 := time.Now()
	a, b := &outboxd{name: "a", clientID: "outboxd-a"}, &outboxd{name: "b", clientID: "outboxd-b"}
	terms := []term{{inst: a, epoch: 1, start: t0}, {inst: b, epoch: 2, start: t0.Add(10 * time.Second)},
		{inst: a, epoch: 3, start: t0.Add(20 * time.Second)}}
	sent := map[string][]time.Duration{"outboxd-a": {time.Second, 9 * time.Second, 11 * time.Second, 21 * time.Second},
		"outboxd-b": {12 * time.Second, 25 * time.Second}}
	produces := func(id string, since time.Time) []kafkatap.Request {
		var out []kafkatap.Request
		for _, d := range sent[id] {
			if at := t0.Add(d); !at.Before(since) {
				out = append(out, kafkatap.Request{ClientID: id, Forwarded: at})
			}
		}
		return out
	}
	// a at 11 s (inside b's term) and b at 25 s (inside a's second term) are stale.
	if n := staleProduces(terms, produces); n != 2 {
		t.Fatalf("stale produces %d, want 2", n)
	}
	// The terms a watcher records: a crash failover lost the claim of a's term (epoch 3), so
	// b's next claim repeats it; b's term still begins. A deposed a that still says leader
	// (its older start) begins none, and neither does a repeat of the current term.
	cur := term{inst: a, epoch: 3, start: t0.Add(20 * time.Second)}
	for _, c := range []struct {
		t    term
		want bool
	}{
		{term{inst: b, epoch: 3, start: t0.Add(27 * time.Second)}, true},
		{term{inst: b, epoch: 2, start: t0.Add(10 * time.Second)}, false},
		{term{inst: a, epoch: 3, start: t0.Add(20 * time.Second)}, false},
		{term{inst: a, epoch: 4, start: t0.Add(30 * time.Second)}, true},
		{term{inst: b, epoch: 3}, false}, // no since reported: only a higher epoch tells
	} {
		if got := c.t.begins(&cur); got != c.want {
			t.Errorf("term of %s epoch %d start %v after a's epoch 3: begins %v, want %v", c.t.inst.name, c.t.epoch, c.t.start.Sub(t0), got, c.want)
		}
	}
	if p50, mx := percentile([]float64{3, 1, 2, 10}, 0.5), percentile([]float64{3, 1, 2, 10}, 1); p50 != 2 || mx != 10 {
		t.Fatalf("p50 %v max %v, want 2 and 10", p50, mx)
	}
	g := &generator{rows: map[string]*genRow{"a1": {Key: "k0", Seq: 1, State: stCommitted}}, txns: map[string]int{}}
	got := deliveries{all: []delivery{
		{Sink: "kafka", Offset: 0, ID: "a1", Key: "k0", Seq: 1, Arrived: t0.Add(time.Second)},
		{Sink: "kafka", Offset: 1, ID: "a1", Key: "k0", Seq: 1, Arrived: t0.Add(11 * time.Second)},
	}, first: map[string]int{"a1": 0}}
	r := verify(g, map[string]bool{"a1": true}, nil, got, []epoch{{Start: t0}, {Start: t0.Add(10 * time.Second), After: "leader_blackhole"}})
	if r.Duplicates != 1 || len(r.DuplicatesPerCrash) != 1 || r.DuplicatesPerCrash[0] != 1 {
		t.Fatalf("a resend after a takeover: duplicates %d per crash %v", r.Duplicates, r.DuplicatesPerCrash)
	}
}

// A short chaos run against the real servers, a replicated MariaDB pair (planned switchovers and
// replica crashes join the faults), two instances with ha on and the mysql store:
// every fault kind at least once (the leader faults too), nothing lost, nothing out of order, no
// produce of a deposed leader after a takeover. The final catch-up waits up to 3 minutes, far
// longer than any fault here can stall delivery (outboxd's reconnect backoff tops out at 10 s).
// The fault phase is 60 s (one round of every kind takes about 40 s; a crash failover keeps the
// dead server away for 6 s): the blackholed and the
// paused leader each take about W (6 s with the 2 s lease) before the standby may take over.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB and about a minute")
	}
	mariadb.RequireT(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d (rerun: go run ./chaos -seed %d -duration 60s -gap 300ms -hold-scale 0.4 -replicated)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Duration: 60 * time.Second, Rate: 150, Instances: 2, Seed: seed, CatchUp: 3 * time.Minute,
		Gap: 300 * time.Millisecond, HoldScale: 0.4, Replicated: true, Verbose: true, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if rep.Lost != 0 || rep.OrderViolations != 0 || !rep.OK() {
		t.Fatalf("lost %d, order violations %d, rolled-back delivered %d, phantoms %d, bad %d; examples %v; outboxd log kept in %s",
			rep.Lost, rep.OrderViolations, rep.RolledBackDelivered, rep.Phantoms, rep.BadMessages, rep.Examples, rep.KeptDir)
	}
	// The life cycle ran: cleanup deleted, dark rows were written, the periodic reconcile ran.
	if rep.CleanupDeleted == 0 || rep.DarkRows == 0 || rep.PeriodicReconciles == 0 {
		t.Errorf("cleanup deleted %d rows, %d dark rows committed, %d periodic reconcile runs: the life cycle did not run",
			rep.CleanupDeleted, rep.DarkRows, rep.PeriodicReconciles)
	}
	if rep.RowsCommitted < 1000 {
		t.Fatalf("only %d rows committed: the generator barely ran", rep.RowsCommitted)
	}
	for _, k := range append(append(append([]string(nil), faultKinds...), haKinds...), replKinds...) {
		if rep.Faults[k] == 0 {
			t.Errorf("fault %s never injected: %v", k, rep.Faults)
		}
	}
	if len(rep.Takeovers) < len(haKinds) || rep.TakeoverTimeouts != 0 || rep.Leaderless != 0 {
		t.Errorf("takeovers %v, %d not within the bound, %d leader faults skipped; logs kept in %s", rep.Takeovers, rep.TakeoverTimeouts, rep.Leaderless, rep.KeptDir)
	}
	// A first switchover before any crash failover makes server 2 the primary and server 1
	// refuses for a while: outboxd must have streamed from server 2. (A crash failover first
	// rebuilds server 1 as a replica with every transaction, and outboxd may stay on it.)
	if rep.Switchovers == 0 || rep.CrashFailovers == 0 || (rep.MissingReports != 0 && rep.CrashFailovers == 0) || rep.ReplicaError != "" || len(rep.SourceConns) != 2 || (rep.LeftServer1 && rep.SourceConns[1] == 0) {
		t.Errorf("switchovers %d and crash failovers %d (want at least 1 each), delivered transactions reported missing %d (want 0 without a crash failover), replica error %q, source connections per server %v (want some to server 2 when the first switchover left server 1: %v)",
			rep.Switchovers, rep.CrashFailovers, rep.MissingReports, rep.ReplicaError, rep.SourceConns, rep.LeftServer1)
	}
	if rep.MySQLProxyConns == 0 || rep.KafkaProxyConns == 0 {
		t.Errorf("outboxd bypassed a proxy: %d MariaDB, %d Kafka connections through them", rep.MySQLProxyConns, rep.KafkaProxyConns)
	}
}
