package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/testenv/faultproxy"
)

// Tests of issue 10's HA (HA-CONTRACT.md): two outboxd binaries with one config, a named lock on
// the primary, fencing by lease and by epoch. Which instance sent what is read off the broker's
// side (kafkatap records each Produce request with the client id it carries).

// dupsWithin fails unless every duplicate is of an event whose GTID is after saved (the row
// at the crash) and that was committed before the crash: duplicates come only from the window
// the crashed leader had sent and not yet checkpointed.
func dupsWithin(t *testing.T, rs []*kgo.Record, f *flow, saved string, crash time.Time) int {
	t.Helper()
	savedSeq := gtidSeq(t, saved)
	count := map[string]int{}
	for _, r := range rs {
		count[header(r, "event_id")]++
	}
	dups := 0
	for id, n := range count {
		if n < 2 {
			continue
		}
		dups += n - 1
		if n > 2 {
			t.Errorf("event %s delivered %d times across one takeover", id, n)
		}
		if g := f.gtid[id]; gtidSeq(t, g) <= savedSeq {
			t.Errorf("event %s (GTID %s) resent though the checkpoint row %s covered it", id, g, saved)
		}
		if f.at[id].After(crash) {
			t.Errorf("event %s begun after the crash and still duplicated", id)
		}
	}
	return dups
}

// Item 1: two processes, one config. Exactly one sends; kill -9 of the leader while rows flow:
// the standby takes over within 10 s, every committed row arrives, per key in order within each
// run, and duplicates are only of what the dead leader had sent past its checkpoint.
func TestHAKill9Takeover(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 2})
	a, b := h.start(0), h.inst[1]
	stA, _ := h.waitRole(a, "leader", 30*time.Second)
	h.start(1)
	h.waitRole(b, "standby", 30*time.Second)
	if code, body := admGet(b.admin, "/readyz"); code != http.StatusOK || !strings.Contains(body, "standby") {
		t.Errorf("standby /readyz %d %s, want 200 naming the standby", code, body)
	}
	if code, _ := admGet(b.admin, "/healthz"); code != http.StatusOK {
		t.Errorf("standby /healthz %d", code)
	}

	f := h.startFlow("ev", 5*time.Millisecond)
	c := newConsumer(t, h.kc, "t")
	c.waitFor(100, 30*time.Second)
	// Exactly one sends: a's produces reach the broker, b's do not (b has its sink open).
	if n := len(h.tap.Produces(a.clientID, time.Time{})); n == 0 {
		t.Fatalf("the leader sent no produce request through the tap")
	}
	if ps := h.tap.Produces(b.clientID, time.Time{}); len(ps) != 0 {
		t.Fatalf("the standby sent %d produce requests while a led", len(ps))
	}
	if r := b.role(); r != "standby" {
		t.Fatalf("b is %q while a leads", r)
	}

	// Freeze a for a moment so the row read is the row at the crash, then kill -9. Nothing
	// committed after the freeze can have been sent by a.
	crash := time.Now()
	a.signal(t, syscall.SIGSTOP)
	time.Sleep(300 * time.Millisecond)
	saved := h.row()
	a.signal(t, syscall.SIGKILL)
	killed := time.Now()
	a.p.wait(t, 10*time.Second)
	stB, seen := h.waitRole(b, "leader", 10*time.Second)
	takeover := b.becameLeader(stB, seen).Sub(killed)
	t.Logf("takeover after kill -9: %s (epoch %d -> %d); checkpoint at the crash %s", takeover, stA.Epoch, stB.Epoch, saved.GTIDSet)
	if takeover > 10*time.Second {
		t.Fatalf("takeover took %s, want within 10 s", takeover)
	}
	if stB.Epoch != stA.Epoch+1 || stB.Holder == stA.Holder || stB.Holder == "" {
		t.Errorf("new leader's epoch %d holder %q; the old one had %d %q: want epoch+1 and another holder", stB.Epoch, stB.Holder, stA.Epoch, stA.Holder)
	}
	if saved.Holder != stA.Holder || saved.Epoch != stA.Epoch {
		t.Errorf("row at the crash names %q epoch %d, want the leader's %q %d", saved.Holder, saved.Epoch, stA.Holder, stA.Epoch)
	}

	time.Sleep(2 * time.Second) // rows keep flowing under the new leader
	committed := f.halt(t)
	c.waitForEvent(committed[len(committed)-1], 30*time.Second)
	rs := c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, committed)
	checkRuns(t, rs, committed, 2)
	dups := dupsWithin(t, rs, f, saved.GTIDSet, crash)
	if len(h.tap.Produces(b.clientID, time.Time{})) == 0 {
		t.Fatal("the new leader sent nothing")
	}
	if ps := h.tap.Produces(a.clientID, crash); len(ps) != 0 {
		t.Fatalf("%d produces from the killed leader after the kill", len(ps))
	}
	// The new leader checkpoints under its own token.
	deadline := time.Now().Add(10 * time.Second)
	for r := h.row(); r.Holder != stB.Holder || r.Epoch != stB.Epoch || gtidSeq(t, r.GTIDSet) < gtidSeq(t, f.gtid[committed[len(committed)-1]]); r = h.row() {
		if time.Now().After(deadline) {
			t.Fatalf("row %+v, want b's token (%s, %d) and the last commit %s", r, stB.Holder, stB.Epoch, f.gtid[committed[len(committed)-1]])
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d committed, %d received, %d duplicates", len(committed), len(rs), dups)
	if rc, ok := b.lastRoleChange("leader"); !ok || rc.Epoch != stB.Epoch || rc.LockName != h.lock {
		t.Errorf("no role changed line for b's term (epoch %d, lock %s): %+v", stB.Epoch, h.lock, b.roleChanges())
	}
}

// Item 2: the leader's path to MariaDB is blackholed (no FIN reaches either side). The standby
// takes over within the documented bound, the old leader fences itself first, and from the
// moment the new leader took the lock no produce request of the old one reaches the broker.
// The broker answers produces late (0.8 s) around the cut, so the old leader has sends in
// flight and read transactions queued when it fences: it must not start another send after.
func TestHABlackholedLeaderFences(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 2, Lease: 2 * time.Second, KafkaTimeout: 3 * time.Second})
	a, b := h.start(0), h.inst[1]
	h.waitRole(a, "leader", 30*time.Second)
	h.start(1)
	h.waitRole(b, "standby", 30*time.Second)
	f := h.startFlow("ev", 5*time.Millisecond)
	c := newConsumer(t, h.kc, "t")
	c.waitFor(50, 30*time.Second)

	slowUntil := time.Now().Add(5 * time.Second)
	h.kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		if time.Now().Before(slowUntil) {
			h.kc.SleepControl(func() { time.Sleep(800 * time.Millisecond) })
		}
		return nil, nil, false // then handled as usual
	})
	time.Sleep(time.Second) // sends pile up
	a.myPx.SetMode(faultproxy.Blackhole)
	cut := time.Now()
	W, bound := h.haBound()
	const start = 3 * time.Second // start-up queries and the standby's 1 s GET_LOCK polls
	stB, seen := h.waitRole(b, "leader", bound+start+5*time.Second)
	took := b.becameLeader(stB, seen)
	t.Logf("blackhole at %s; b leads at %s (after %s; W %s, bound %s + start)", cut.Format("15:04:05.000"),
		took.Format("15:04:05.000"), took.Sub(cut), W, bound)
	h.logTap()
	if d := took.Sub(cut); d > bound+start {
		t.Errorf("takeover %s after the cut, want within W + 1 s + start = %s", d, bound+start)
	}
	// The fence: a saw it could not prove the lock and stopped, before b took it.
	var fenced roleChange
	admWaitFor(t, 5*time.Second, func() string { return fmt.Sprintf("a's role changes %+v", a.roleChanges()) }, func() bool {
		var ok bool
		fenced, ok = a.lastRoleChange("fenced")
		return ok
	})
	if !fenced.At.Before(took) {
		t.Errorf("a fenced at %s, not before b took the lock at %s", fenced.At.Format("15:04:05.000"), took.Format("15:04:05.000"))
	}
	if d := fenced.At.Sub(cut); d > h.opts.Lease+time.Second {
		t.Errorf("a fenced %s after the cut, want within the lease (%s) and a second", d, h.opts.Lease)
	}
	if v, ok := a.metric("outboxd_fences_total"); !ok || v < 1 {
		t.Errorf("a's outboxd_fences_total %v (%v), want >= 1", v, ok)
	}
	if v, ok := a.metric("outboxd_leader"); ok && v != 0 {
		t.Errorf("a's outboxd_leader %v after the fence", v)
	}
	if ps := h.tap.Produces(a.clientID, took); len(ps) != 0 {
		t.Fatalf("%d produce requests of the old leader reached the broker after the new one took the lock; first forwarded at %s",
			len(ps), ps[0].Forwarded.Format("15:04:05.000"))
	}
	// No send attempt after the fence (the log line is written when the lease ran out; allow
	// a send the guard let through a moment before it to be on the wire).
	late := 0
	for _, r := range h.tap.Produces(a.clientID, fenced.At.Add(100*time.Millisecond)) {
		late++
		t.Errorf("old leader's produce began at %s, after its fence at %s", r.Began.Format("15:04:05.000"), fenced.At.Format("15:04:05.000"))
		if late > 3 {
			break
		}
	}
	inCut := len(h.tap.Produces(a.clientID, cut.Add(-time.Second)))
	t.Logf("old leader: %d produce requests forwarded in the second before the cut and after it", inCut)
	if inCut == 0 {
		t.Fatal("the old leader had no sends around the cut: the test proves nothing about in-flight sends")
	}

	time.Sleep(time.Second)
	committed := f.halt(t)
	// Heal a's path: it must not lead again while b does (it either exits superseded or waits).
	a.myPx.SetMode(faultproxy.Pass)
	c.waitForEvent(committed[len(committed)-1], 30*time.Second)
	rs := c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, committed)
	checkRuns(t, rs, committed, 2)
	time.Sleep(3 * time.Second)
	if a.p.running() {
		if r := a.role(); r == "leader" {
			t.Fatalf("a leads again while b holds the lock")
		}
	} else if !strings.Contains(a.p.output(), "superseded") {
		t.Fatalf("a exited (%v) without saying it was superseded", a.p.err)
	}
	if r := b.role(); r != "leader" {
		t.Fatalf("b is %q after a's path healed", r)
	}
	if ps := h.tap.Produces(a.clientID, took); len(ps) != 0 {
		t.Fatalf("%d produce requests of the old leader after the new one took the lock (after the heal)", len(ps))
	}
}

// Item 3: a zombie. SIGSTOP the leader longer than the lease plus W, the standby takes over,
// SIGCONT: the woken leader does not move the checkpoint (the row keeps the new leader's token
// and position) and exits non-zero saying it was superseded.
func TestHAZombieLeaderSuperseded(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 2, Lease: 3 * time.Second, Interval: "1s"})
	a, b := h.start(0), h.inst[1]
	stA, _ := h.waitRole(a, "leader", 30*time.Second)
	h.start(1)
	h.waitRole(b, "standby", 30*time.Second)
	f := h.startFlow("ev", 5*time.Millisecond)
	c := newConsumer(t, h.kc, "t")
	c.waitFor(50, 30*time.Second)

	// a freezes with sent, acknowledged and not yet saved work (a 1 s save interval).
	a.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	W, _ := h.haBound()
	stB, _ := h.waitRole(b, "leader", h.opts.Lease+W+10*time.Second)
	if d := time.Since(frozen); d < h.opts.Lease+W {
		time.Sleep(h.opts.Lease + W - d)
	}
	t.Logf("b leads (epoch %d) %s after a froze", stB.Epoch, time.Since(frozen))
	if stB.Epoch <= stA.Epoch {
		t.Fatalf("b's epoch %d, a's %d", stB.Epoch, stA.Epoch)
	}
	committed := f.halt(t)
	c.waitForEvent(committed[len(committed)-1], 30*time.Second)

	// Freeze b too, briefly (well inside its lease), so any write to the row is a's.
	b.signal(t, syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond)
	before := h.row()
	if before.Holder != stB.Holder || before.Epoch != stB.Epoch {
		t.Fatalf("row %+v before the wake-up, want b's token %s %d", before, stB.Holder, stB.Epoch)
	}
	woke := time.Now()
	a.signal(t, syscall.SIGCONT)
	for time.Since(woke) < 1500*time.Millisecond && a.p.running() {
		if r := h.row(); r != before {
			b.signal(t, syscall.SIGCONT)
			t.Fatalf("the woken leader moved the checkpoint: %+v -> %+v", before, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.signal(t, syscall.SIGCONT)
	code := a.p.wait(t, 30*time.Second)
	out := a.p.output()
	if code == 0 || !strings.Contains(out, "superseded") {
		t.Fatalf("woken leader exited %d, want non-zero with \"superseded\":\n%s", code, tail(out, 30))
	}
	t.Logf("a exited %d %s after SIGCONT", code, time.Since(woke))
	if r := h.row(); r.Holder != stB.Holder || r.Epoch != stB.Epoch {
		t.Fatalf("row %+v after a's exit, want b's token %s %d", r, stB.Holder, stB.Epoch)
	}
	if ps := h.tap.Produces(a.clientID, woke); len(ps) != 0 {
		t.Logf("note: the woken leader sent %d produce requests after SIGCONT (before it fenced)", len(ps))
	}
	// b goes on, and its row names the position it reports.
	if r := b.role(); r != "leader" {
		t.Fatalf("b is %q after the zombie exited", r)
	}
	g := h.w.commit(row{EventID: "after", Key: "k0", Topic: "t", Payload: []byte("x")})
	c.waitForEvent("after", 20*time.Second)
	waitStoreRow(t, h.w.db, h.table, h.ckName, g, 10*time.Second)
	if r := h.row(); r.Holder != stB.Holder {
		t.Fatalf("row holder %q, want b's %q", r.Holder, stB.Holder)
	}
	rs := c.settle(300 * time.Millisecond)
	checkPerKeyOrder(t, rs, append(committed, "after"))
}

// Item 4: the lock connection KILLed from the server side: the leader fences within a second,
// then (no other instance running) takes the lock again with the next epoch and goes on.
func TestHALockConnectionKilled(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 1})
	a := h.start(0)
	st, _ := h.waitRole(a, "leader", 30*time.Second)
	c := newConsumer(t, h.kc, "t")
	h.w.commit(row{EventID: "e0", Key: "k", Topic: "t", Payload: []byte("x")})
	c.waitForEvent("e0", 20*time.Second)

	h.killLockConn()
	killed := time.Now()
	var at time.Time
	admWaitFor(t, 5*time.Second, func() string { return fmt.Sprintf("a is %q, role changes %+v", a.role(), a.roleChanges()) }, func() bool {
		if v, ok := a.metric("outboxd_fences_total"); ok && v >= 1 {
			at = time.Now()
			return true
		}
		return false
	})
	d := at.Sub(killed)
	if rc, ok := a.lastRoleChange("fenced"); ok && rc.At.Sub(killed) < d {
		d = rc.At.Sub(killed)
	}
	t.Logf("fenced %s after the KILL", d)
	if d > time.Second {
		t.Errorf("fenced %s after the lock connection was killed, want within 1 s", d)
	}
	if _, ok := a.lastRoleChange("fenced"); !ok {
		t.Errorf("no role changed line with role fenced: %+v", a.roleChanges())
	}

	// Alone, a takes the lock again after stepping down (S = the kafka timeout, then its poll).
	st2, _ := h.waitRole(a, "leader", h.opts.KafkaTimeout+15*time.Second)
	if st2.Epoch != st.Epoch+1 {
		t.Fatalf("epoch %d after re-taking the lock, want %d", st2.Epoch, st.Epoch+1)
	}
	if h.lockHolderConn() == 0 {
		t.Fatal("the lock is free while a says it leads")
	}
	g := h.w.commit(row{EventID: "e1", Key: "k", Topic: "t", Payload: []byte("x")})
	c.waitForEvent("e1", 20*time.Second)
	waitStoreRow(t, h.w.db, h.table, h.ckName, g, 10*time.Second)
	if r := h.row(); r.Epoch != st2.Epoch || r.Holder != st2.Holder {
		t.Fatalf("row %+v, want the new term's token %s %d", r, st2.Holder, st2.Epoch)
	}
	if !a.p.running() {
		t.Fatalf("a exited: %v", a.p.err)
	}
}

// Item 6 (the CLI half): checkpoint set refuses while a leader holds the lock; with
// --ignore-leader it writes and bumps the epoch, so the running leader is superseded at its next
// save and exits; with no leader a plain set works.
func TestHACheckpointSetRefusesWhileLeading(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 1})
	a := h.start(0)
	st, _ := h.waitRole(a, "leader", 30*time.Second)
	g0 := h.w.commit(row{EventID: "e0", Key: "k", Topic: "t", Payload: []byte("x")})
	waitStoreRow(t, h.w.db, h.table, h.ckName, g0, 20*time.Second)
	before := h.row()
	pos := h.w.position()

	code, out := runBinary(t, "checkpoint", "set", "--config", a.cfgPath, "--gtid", pos)
	if code == 0 || !strings.Contains(out, "--ignore-leader") {
		t.Fatalf("set under a leader: exit %d, want a refusal naming --ignore-leader:\n%s", code, out)
	}
	if r := h.row(); r.Epoch != before.Epoch || r.Holder != before.Holder {
		t.Fatalf("refused set changed the row: %+v -> %+v", before, r)
	}
	if !a.p.running() || a.role() != "leader" {
		t.Fatalf("the leader did not survive a refused set")
	}

	code, out = runBinary(t, "checkpoint", "set", "--config", a.cfgPath, "--gtid", pos, "--ignore-leader")
	if code != 0 {
		t.Fatalf("set --ignore-leader: exit %d:\n%s", code, out)
	}
	after := h.row()
	if after.Epoch != st.Epoch+1 || after.GTIDSet != pos {
		t.Fatalf("row after set --ignore-leader %+v, want epoch %d and %s", after, st.Epoch+1, pos)
	}
	h.w.commit(row{EventID: "e1", Key: "k", Topic: "t", Payload: []byte("x")}) // a's next save
	code = a.p.wait(t, 30*time.Second)
	if code == 0 || !strings.Contains(a.p.output(), "superseded") {
		t.Fatalf("leader after a forced set: exit %d, want non-zero with \"superseded\":\n%s", code, tail(a.p.output(), 30))
	}
	if r := h.row(); r.Epoch != after.Epoch || r.GTIDSet != pos {
		t.Fatalf("the superseded leader moved the row: %+v -> %+v", after, r)
	}

	code, out = runBinary(t, "checkpoint", "set", "--config", a.cfgPath, "--gtid", pos)
	if code != 0 {
		t.Fatalf("set with no leader: exit %d:\n%s", code, out)
	}
}
