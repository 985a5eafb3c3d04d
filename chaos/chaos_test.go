package main

import (
	"context"
	"testing"
	"time"

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
	r := verify(g, truth, good, epochs)
	if !r.OK() || r.Duplicates != 2 || len(r.DuplicatesPerCrash) != 1 || r.DuplicatesPerCrash[0] != 2 || r.MaxDuplicateBurst != 2 {
		t.Fatalf("clean run judged wrong: %+v", r)
	}

	bad := deliveries{all: []delivery{
		mk(0, "a2", "k0", 2, time.Second), mk(1, "a1", "k0", 1, time.Second), // reordered
		mk(2, "r1", "k1", 2, time.Second), // rolled back, delivered
	}, first: map[string]int{"a2": 0, "a1": 1, "r1": 2}}
	r = verify(g, truth, bad, epochs)
	if r.Lost != 2 || r.OrderViolations != 1 || r.RolledBackDelivered != 1 || r.OK() {
		t.Fatalf("bad run: lost %d (want 2: a3, b1), violations %d (want 1), rolled back delivered %d (want 1), ok %v",
			r.Lost, r.OrderViolations, r.RolledBackDelivered, r.OK())
	}
}

// A short chaos run against the real servers: every fault kind at least once, nothing lost,
// nothing out of order. The final catch-up waits up to 3 minutes, far longer than any fault
// here can stall delivery (outboxd's reconnect backoff tops out at 10 s).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB and about a minute")
	}
	mariadb.RequireT(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d (rerun: go run ./chaos -seed %d -duration 40s -gap 300ms -hold-scale 0.4)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Duration: 40 * time.Second, Rate: 150, Seed: seed, CatchUp: 3 * time.Minute,
		Gap: 300 * time.Millisecond, HoldScale: 0.4, Verbose: true, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if rep.Lost != 0 || rep.OrderViolations != 0 || !rep.OK() {
		t.Fatalf("lost %d, order violations %d, rolled-back delivered %d, phantoms %d, bad %d; examples %v; outboxd log kept in %s",
			rep.Lost, rep.OrderViolations, rep.RolledBackDelivered, rep.Phantoms, rep.BadMessages, rep.Examples, rep.KeptDir)
	}
	if rep.RowsCommitted < 1000 {
		t.Fatalf("only %d rows committed: the generator barely ran", rep.RowsCommitted)
	}
	for _, k := range faultKinds {
		if rep.Faults[k] == 0 {
			t.Errorf("fault %s never injected: %v", k, rep.Faults)
		}
	}
	if rep.MySQLProxyConns == 0 || rep.KafkaProxyConns == 0 {
		t.Errorf("outboxd bypassed a proxy: %d MariaDB, %d Kafka connections through them", rep.MySQLProxyConns, rep.KafkaProxyConns)
	}
}
