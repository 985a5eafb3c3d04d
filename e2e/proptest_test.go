package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/election"
)

// The randomized property tests of cleanup (issue 21): with clocks ahead and behind, zones
// and DST, rows without binlog, long event ids, oversized and unrouted rows, restarts, key
// queue overflow and takeovers, at every moment each committed outbox row is on the broker
// (at the topic its route gives), or in its table, or both. A watcher goroutine samples that
// while the run goes; in the end every delivered row with a plausible created_at is deleted.

// proptestRand is the tests' random source: seed 21, or OUTBOXD_PROPTEST_SEED. The seed is
// logged, so a failing run can be repeated.
func proptestRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(21)
	if v := os.Getenv("OUTBOXD_PROPTEST_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("OUTBOXD_PROPTEST_SEED=%q: want an unsigned integer", v)
		}
	}
	t.Logf("seed %d (OUTBOXD_PROPTEST_SEED=%d repeats this run)", seed, seed)
	return rand.New(rand.NewPCG(seed, 1))
}

// Europe/Berlin's last DST change of 2025: at 01:00 UTC on 26 October 03:00 CEST went back
// to 02:00 CET, so the wall-clock hour 02:00-03:00 happened twice, from 00:00 and 01:00 UTC.
var berlinRepeatedHour = time.Date(2025, 10, 26, 0, 0, 0, 0, time.UTC)

// randomRows draws n rows (ids numbered from base) of the mix and adds those that must be
// deleted in the end to sw.mustGo: delivered (in the binlog, routed to t, not too large) with
// a created_at that the sweep's bounds reach. The mix: a quarter without binlog
// (sql_log_bin=0: never relayed, never to be deleted), a fifth with event ids of 260 to 400
// bytes (ts_outbox's VARCHAR(400)), a tenth too large for the broker (dead-lettered), a tenth
// routed nowhere (dead-lettered), and for the time: a created_at from a client clock 30 min to
// 10 h behind or ahead, a DATETIME (outbox_event) written by a session 8 h behind or 9 h ahead
// of cleanup.time_zone, and a TIMESTAMP written in Europe/Berlin at a server clock (SET
// TIMESTAMP) in the DST change's repeated hour.
func (sw *sweepWorld) randomRows(rnd *rand.Rand, base, n int) []ins {
	var rows []ins
	for i := range n {
		id := fmt.Sprintf("r%d-%d", base+i, rnd.IntN(1000))
		if rnd.IntN(5) == 0 {
			id = long(id+"-", 260+rnd.IntN(140))
		}
		r := ins{table: "ts_outbox", id: id, topic: "t", bin: rnd.IntN(4) != 0}
		if rnd.IntN(3) == 0 && len(id) <= 64 {
			r.table = "outbox_event" // event_id VARCHAR(64), created_at DATETIME
		}
		plausible := true // the sweep's bounds reach created_at
		switch rnd.IntN(8) {
		case 0:
			r.createdAt = fmt.Sprintf("NOW(6) - INTERVAL %d MINUTE", 30+rnd.IntN(600)) // a clock behind
			plausible = false                                                          // proven only by a wide enough broker read
		case 1:
			r.createdAt = fmt.Sprintf("NOW(6) + INTERVAL %d MINUTE", 30+rnd.IntN(600)) // a clock ahead
			plausible = false                                                          // not a candidate before then
		case 2:
			r.zone = "-08:00" // a DATETIME looks 8 h old
		case 3:
			r.zone = "+09:00" // a DATETIME looks 9 h ahead: not a candidate before then
			plausible = r.table == "ts_outbox"
		case 4:
			r.table, r.zone = "ts_outbox", "Europe/Berlin"
			r.at = berlinRepeatedHour.Add(time.Duration(rnd.IntN(2))*time.Hour + time.Duration(rnd.IntN(3600))*time.Second)
		}
		switch rnd.IntN(10) {
		case 0:
			r.payload = 8000 // refused by the broker (max_message_bytes 4096): dead-lettered
		case 1:
			r.topic = "nowhere" // no route: dead-lettered
		}
		if r.bin && r.payload == 0 && r.topic == "t" && plausible {
			sw.mustGo[r.id] = true
		}
		rows = append(rows, r)
	}
	return rows
}

// insertTx commits n plain rows (ids prefix0..) to outbox_event in one transaction on one key,
// so their keys reach cleanup together, and records them as must go.
func (sw *sweepWorld) insertTx(prefix string, n int) {
	rows := make([]row, n)
	ids := make([]string, n)
	for i := range rows {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
		rows[i] = row{EventID: ids[i], Key: "bulk", Topic: "t", Payload: []byte("p")}
		sw.mustGo[ids[i]] = true
	}
	sw.commitTo("outbox_event", rows...)
	sw.record(ids...)
}

// keyPath turns the world's cleanup to retention 0: the key path deletes what it can, the
// created_at sweep the rest.
func (sw *sweepWorld) keyPath() {
	sw.o.Extra = strings.Replace(sw.o.Extra, "retention: 1s", "retention: 0s", 1)
}

func (sw *sweepWorld) setPhase(p string) { sw.phase.Store(p) }

func (sw *sweepWorld) phaseName() string {
	p, _ := sw.phase.Load().(string)
	return p
}

// watch checks the invariant from its own goroutine, about every 200 ms, until the returned
// stop (idempotent; also a cleanup of the test) is called. The first violation fails the test
// (t.Errorf) with the event id, the moment the tables were read and the phase (setPhase);
// waitGone then stops the test. While it runs the watcher owns sw.c.
func (sw *sweepWorld) watch() (stop func()) {
	t := sw.t
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	checks := 0
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The committed rows first, the broker last: a row deleted after the tables were
			// read was proven on the broker before.
			all := sw.snapshot()
			at := time.Now()
			left, err := sw.leftErr()
			if err != nil {
				t.Errorf("invariant watcher: read the tables: %v", err)
				return
			}
			ids := lost(all, left, sw.onBroker(100*time.Millisecond))
			if len(ids) > 0 {
				// A record the consumer had not fetched yet is no loss: look again, longer.
				ids = lost(all, left, sw.onBroker(time.Second))
			}
			if len(ids) > 0 {
				short := make([]string, 0, 5)
				for _, id := range ids[:min(len(ids), 5)] {
					short = append(short, id[:min(len(id), 40)])
				}
				t.Errorf("invariant broken at %s (%s, after %d good checks): event %q is neither on the broker at topic t nor in its table; %d such, the first (cut at 40 bytes): %q",
					at.Format("15:04:05.000"), sw.phaseName(), checks, ids[0], len(ids), short)
				return
			}
			checks++
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		<-done
		t.Logf("invariant checked %d times", checks)
	})
	t.Cleanup(stop)
	return stop
}

// waitGone waits until no row of sw.mustGo is left in the tables, stopping the test as soon as
// it failed (the watcher). On a timeout it logs the relays' cleanup lines.
func (sw *sweepWorld) waitGone(timeout time.Duration, rs ...*relay) {
	t := sw.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if t.Failed() {
			t.FailNow()
		}
		left := sw.left()
		var stay []string
		for id := range sw.mustGo {
			if left[id] {
				stay = append(stay, id)
			}
		}
		if len(stay) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, r := range rs {
				for _, l := range strings.Split(r.logText(), "\n") {
					if strings.Contains(l, "cleanup") {
						t.Log(l)
					}
				}
			}
			sort.Strings(stay)
			t.Fatalf("%d delivered rows still in the tables after %s: %q", len(stay), timeout, stay[:min(len(stay), 10)])
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logSum sums the integer field of r's log lines whose message starts with msg.
func logSum(r *relay, msg, field string) int {
	sum := 0
	sc := bufio.NewScanner(strings.NewReader(r.logText()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if m, _ := l["message"].(string); strings.HasPrefix(m, msg) {
			n, _ := l[field].(float64)
			sum += int(n)
		}
	}
	return sum
}

// Queue overflow on the key path: retention 0 with created_at mapped and a key queue of two,
// so most keys are dropped (counted and logged) and their rows left to the sweep, which
// deletes them only on proof. Transactions of 40 rows on one key make the overflow certain; a
// restart loses the queue as well. The invariant holds all along and every delivered row goes.
func TestCleanupRandomizedKeyQueueOverflow(t *testing.T) {
	rnd := proptestRand(t)
	sw := newSweepWorld(t, "")
	sw.keyPath()
	opts := daemon.Options{CleanupQueueKeys: 2}
	r := startRelay(t, sw.o, opts)
	stop := sw.watch()
	var logs []*relay
	for i := range 3 {
		sw.setPhase(fmt.Sprintf("batch %d", i))
		sw.insert(sw.randomRows(rnd, i*100, 100)...)
		sw.insertTx(fmt.Sprintf("bulk%d-", i), 40)
		if i == 1 {
			sw.setPhase("restart")
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			logs = append(logs, r)
			r = startRelay(t, sw.o, opts)
		}
	}
	logs = append(logs, r)
	sw.setPhase("draining")
	sw.waitGone(90*time.Second, logs...)
	stop()
	sw.checkInvariant("at the end")
	dropped, proven := 0, 0
	for _, r := range logs {
		dropped += logSum(r, "cleanup: key queue full", "keys")
		proven += logSum(r, "cleanup sweep", "proven")
	}
	if dropped == 0 {
		t.Fatal("no key was dropped: the queue never overflowed, the test proves nothing")
	}
	if proven == 0 {
		t.Fatal("the sweep proved no row: who deleted the rows of the dropped keys?")
	}
	t.Logf("%d rows, %d must go, %d keys dropped, %d rows proven by the sweep", sw.committed(), len(sw.mustGo), dropped, proven)
}

// Takeovers: relays in HA (mysql store) on the outbox tables while the random mix flows. A
// first leader with an hour's retention delivers a batch and stops; with the test holding the
// lock two relays with retention 0 stand by and delete nothing, though the delivered rows are
// on the broker. Then one leads; it is stopped (a graceful takeover), restarted as a
// standby, and the next leader's lock connection is KILLed (a forced takeover). The invariant
// holds throughout, no relay runs cleanup before it leads, and in the end every delivered row
// is deleted.
func TestCleanupRandomizedTakeovers(t *testing.T) {
	rnd := proptestRand(t)
	sw := newSweepWorld(t, "")
	sw.keyPath()
	name := "pt-" + sw.schema
	ckTable := haCfg(t, sw.world, &sw.o, name)
	lock := lockNameOf(sw.o, name)
	stop := sw.watch()
	var relays []*relay
	start := func(o cfgOpts) *relay {
		r := startRelay(t, o, daemon.Options{})
		relays = append(relays, r)
		return r
	}
	starting := func(r *relay) int { return strings.Count(r.logText(), `"message":"starting"`) }
	// mark is each relay's count of "starting" lines (each is a term as leader); waitLeader
	// waits for a relay to log one more than at the mark and returns it.
	mark := func() []int {
		m := make([]int, len(relays))
		for i, r := range relays {
			m[i] = starting(r)
		}
		return m
	}
	waitLeader := func(m []int, within time.Duration) *relay {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			for i, r := range relays {
				if i >= len(m) && starting(r) > 0 || i < len(m) && starting(r) > m[i] {
					t.Logf("%s: relay %d leads", sw.phaseName(), i)
					return r
				}
			}
			if t.Failed() {
				t.FailNow()
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new leader within %s (phase %s)", within, sw.phaseName())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	sw.setPhase("first leader, an hour's retention")
	hourly := sw.o
	hourly.Extra = strings.Replace(hourly.Extra, "retention: 0s", "retention: 1h", 1)
	first := start(hourly)
	sw.insert(sw.randomRows(rnd, 0, 100)...)
	waitStoreRow(t, sw.db, ckTable, name, sw.position(), 30*time.Second)
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	// The test holds the lock: the relays stand by.
	holder, err := sw.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got int
	if err := holder.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 10)", lock).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK(%s) = %d, %v", lock, got, err)
	}
	sw.setPhase("standing by")
	sw.insert(sw.randomRows(rnd, 100, 50)...) // committed with no leader
	before := sw.left()
	start(sw.o)
	start(sw.o)
	time.Sleep(5 * time.Second)
	if after := sw.left(); !maps.Equal(after, before) {
		t.Fatalf("standbys deleted rows: %d of %d left", len(after), len(before))
	}
	if m := mark(); m[1]+m[2] != 0 {
		t.Fatal("a relay leads although the test holds the lock")
	}
	m := mark()
	if _, err := holder.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", lock); err != nil {
		t.Fatal(err)
	}
	sw.setPhase("second leader")
	leader := waitLeader(m, 20*time.Second)
	sw.insert(sw.randomRows(rnd, 150, 100)...)
	time.Sleep(2 * time.Second)

	// A graceful takeover: the leader stops while rows go in.
	sw.setPhase("graceful takeover")
	m = mark()
	leader.cancel()
	sw.insert(sw.randomRows(rnd, 250, 50)...)
	if err := leader.stop(t); err != nil {
		t.Fatal(err)
	}
	leader = waitLeader(m, 20*time.Second)
	start(sw.o) // the stopped one comes back, as a standby
	sw.insert(sw.randomRows(rnd, 300, 50)...)
	time.Sleep(2 * time.Second)

	// A forced takeover: the leader's lock connection is KILLed while rows go in.
	sw.setPhase("forced takeover")
	id, held, err := election.LockHolder(context.Background(), sw.db, lock)
	if err != nil || !held {
		t.Fatalf("lock %s: held %v, %v", lock, held, err)
	}
	m = mark()
	sw.exec(fmt.Sprintf("KILL CONNECTION %d", id))
	sw.insert(sw.randomRows(rnd, 350, 50)...)
	waitLeader(m, 30*time.Second)

	sw.setPhase("draining")
	sw.waitGone(90*time.Second, relays...)
	stop()
	sw.checkInvariant("at the end")
	// No relay ran cleanup before it first led.
	for i, r := range relays {
		logs := r.logText()
		upTo := strings.Index(logs, `"message":"starting"`)
		if upTo < 0 {
			upTo = len(logs)
		}
		if j := strings.Index(logs[:upTo], `"component":"cleanup"`); j >= 0 {
			t.Errorf("relay %d ran cleanup while standing by: %s", i, strings.SplitN(logs[j:], "\n", 2)[0])
		}
	}
	terms := 0
	for _, n := range mark() {
		terms += n
	}
	t.Logf("%d rows, %d must go, %d terms as leader", sw.committed(), len(sw.mustGo), terms)
}
