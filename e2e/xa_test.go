package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// xaPrepare runs XA START … XA PREPARE on a connection of its own, inserting the outbox rows
// (key k, topic t), and closes that connection: the XA stays prepared, detached from any
// session, as a JTA transaction manager leaves it between its two phases. It returns the
// server's position just before the prepare. A cleanup rolls it back if it is still prepared.
func xaPrepare(w *world, xid string, ids ...string) string {
	w.t.Helper()
	before := w.position()
	db, err := w.srv.DB(context.Background(), "")
	if err != nil {
		w.t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	stmts := []string{"XA START " + xid}
	for _, id := range ids {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO %s.outbox_event (event_id, biz_key, topic, payload) VALUES ('%s', 'k', 't', '%s')", w.schema, id, id))
	}
	stmts = append(stmts, "XA END "+xid, "XA PREPARE "+xid)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			w.t.Fatalf("%s: %v", q, err)
		}
	}
	var connID int64
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&connID); err != nil {
		w.t.Fatal(err)
	}
	if err := db.Close(); err != nil { // the session ends; the XA stays prepared
		w.t.Fatal(err)
	}
	// The server detaches the XA once it has processed the disconnect; only then can another
	// session commit it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := w.db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", connID).Scan(&n); err != nil {
			w.t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("connection %d that prepared %s did not end", connID, xid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Cleanup(func() { _, _ = w.db.Exec("XA ROLLBACK " + xid) })
	return before
}

// xaPrepared lists the xids XA RECOVER reports, to prove an XA is prepared and detached.
func xaPrepared(w *world) []string {
	w.t.Helper()
	rows, err := w.db.Query("XA RECOVER")
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var format, glen, blen int
		var data string
		if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

func received(c *consumer, id string) int {
	n := 0
	for _, r := range c.got {
		if header(r, "event_id") == id {
			n++
		}
	}
	return n
}

// Two-phase XA on MariaDB 10.11: the rows of a prepared XA arrive at its XA COMMIT (issued from
// another connection after the preparing one closed) and not before, after the transaction that
// committed in between; XA ROLLBACK sends nothing and the checkpoint moves past it; a one-phase
// XA arrives at once. While an XA is prepared the checkpoint stays before it, later
// transactions are still delivered, and the age gauge grows.
func TestXATwoPhaseDetachedAndRollback(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	admin := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	startRelay(t, o, daemon.Options{})
	admWaitReady(t, admin, 200, 20*time.Second)
	c := newConsumer(t, kc, "t")

	conn, err := w.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"XA START 'one'", "INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES ('op1', 'k', 't', 'op1')",
		"XA END 'one'", "XA COMMIT 'one' ONE PHASE"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	c.waitForEvent("op1", 20*time.Second)

	pinned := xaPrepare(w, "'jta-1'", "x1a", "x1b")
	if got := xaPrepared(w); !contains(got, "jta-1") {
		t.Fatalf("XA RECOVER = %v, want jta-1 prepared", got)
	}
	mid := w.commit(row{EventID: "mid", Key: "k", Topic: "t", Payload: []byte("mid")})
	c.waitForEvent("mid", 20*time.Second)
	c.settle(700 * time.Millisecond) // several checkpoint intervals
	if n := received(c, "x1a") + received(c, "x1b"); n != 0 {
		t.Fatalf("rows of the prepared XA arrived before its XA COMMIT (%d)", n)
	}
	if got := readCheckpoint(t, o.Dir); got != pinned {
		t.Fatalf("checkpoint %q while jta-1 is prepared; want %q, the position before its XA PREPARE (mid is %s)", got, pinned, mid)
	}
	vals, _ := admScrape(t, admin)
	if vals["outboxd_xa_prepared_transactions"] != 1 {
		t.Fatalf("outboxd_xa_prepared_transactions = %v, want 1", vals["outboxd_xa_prepared_transactions"])
	}
	age1 := vals["outboxd_xa_oldest_prepared_age_seconds"]
	time.Sleep(1500 * time.Millisecond)
	vals, _ = admScrape(t, admin)
	if age2 := vals["outboxd_xa_oldest_prepared_age_seconds"]; age2 < age1+1 || age2 <= 0 {
		t.Fatalf("XA age did not grow: %v then %v", age1, age2)
	}

	xaPrepare(w, "X'0102','bq',3", "x2a")
	w.exec("XA ROLLBACK X'0102','bq',3")
	w.exec("XA COMMIT 'jta-1'") // from another connection than the one that prepared it
	last := w.commit(row{EventID: "last", Key: "k", Topic: "t", Payload: []byte("last")})
	c.waitForEvent("last", 20*time.Second)
	rs := c.settle(300 * time.Millisecond)
	if received(c, "x2a") != 0 {
		t.Fatal("a row of a rolled-back XA was delivered")
	}
	checkPerKeyOrder(t, rs, []string{"op1", "mid", "x1a", "x1b", "last"}) // commit order: mid committed before jta-1
	waitCheckpoint(t, o.Dir, last, 10*time.Second)
	vals, _ = admScrape(t, admin)
	if vals["outboxd_xa_prepared_transactions"] != 0 || vals["outboxd_xa_oldest_prepared_age_seconds"] != 0 {
		t.Fatalf("XA gauges after commit and rollback: %v, %v", vals["outboxd_xa_prepared_transactions"], vals["outboxd_xa_oldest_prepared_age_seconds"])
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A restart with an XA prepared, by kill -9 and by SIGTERM: the checkpoint stayed before the
// prepare, the next run re-reads it, and its XA COMMIT delivers the rows. What was acknowledged
// after the prepare may be resent (the documented duplicates); nothing before it is.
func TestXARestartWithPreparedXA(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	cfgPath := writeCfg(t, o)
	c := newConsumer(t, kc, "t")

	p := startBinary(t, "run", "--config", cfgPath)
	first := w.commit(row{EventID: "a0", Key: "k", Topic: "t", Payload: []byte("a0")})
	c.waitForEvent("a0", 30*time.Second)
	waitCheckpoint(t, o.Dir, first, 10*time.Second)
	pinned := xaPrepare(w, "'r1'", "r1a")
	w.commit(row{EventID: "a1", Key: "k", Topic: "t", Payload: []byte("a1")})
	c.waitForEvent("a1", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	if got := readCheckpoint(t, o.Dir); got != pinned {
		t.Fatalf("checkpoint at kill -9: %q, want %q (before the XA PREPARE)", got, pinned)
	}

	p = startBinary(t, "run", "--config", cfgPath)
	w.exec("XA COMMIT 'r1'")
	c.waitForEvent("r1a", 30*time.Second)
	pinned = xaPrepare(w, "'r2'", "r2a")
	w.commit(row{EventID: "a2", Key: "k", Topic: "t", Payload: []byte("a2")})
	c.waitForEvent("a2", 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != pinned {
		t.Fatalf("checkpoint after SIGTERM: %q, want %q (before the XA PREPARE)", got, pinned)
	}
	if received(c, "r2a") != 0 {
		t.Fatal("r2a arrived before its XA COMMIT")
	}

	p = startBinary(t, "run", "--config", cfgPath)
	w.exec("XA COMMIT 'r2'")
	last := w.commit(row{EventID: "a3", Key: "k", Topic: "t", Payload: []byte("a3")})
	c.waitForEvent("a3", 30*time.Second)
	rs := c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, []string{"a0", "a1", "r1a", "a2", "r2a", "a3"})
	if n := received(c, "a0"); n != 1 {
		t.Fatalf("a0, acknowledged before any XA, arrived %d times", n)
	}
	waitCheckpoint(t, o.Dir, last, 10*time.Second)
	t.Logf("resent after the prepare (documented duplicates): a1 %d times, a2 %d times", received(c, "a1"), received(c, "a2"))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.output())
	}
}

// What outboxd cannot do safely stops it with an error naming XA: an XA COMMIT whose XA PREPARE
// lies before the start position (start: latest), and prepared rows beyond the in-flight
// capacity.
func TestXAUnsafeCasesStop(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	c := newConsumer(t, kc, "t")

	t.Run("commit of a prepare before start: latest", func(t *testing.T) {
		xaPrepare(w, "'before-start'", "old1")
		o := simpleCfg(t, w, kc, "latest")
		admin := admFreeAddr(t)
		o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
		p := startBinary(t, "run", "--config", writeCfg(t, o))
		admWaitReady(t, admin, 200, 20*time.Second) // streaming: s1 lies after "latest"
		w.commit(row{EventID: "s1", Key: "k", Topic: "t", Payload: []byte("s1")})
		c.waitForEvent("s1", 30*time.Second) // streaming from latest
		w.exec("XA COMMIT 'before-start'")
		commitGTID := w.position()
		code := p.wait(t, 30*time.Second)
		out := p.output()
		if code == 0 || !strings.Contains(out, "XA COMMIT 'before-start'") || !strings.Contains(out, "before the start position") {
			t.Fatalf("exit %d, want an error naming XA COMMIT 'before-start':\n%s", code, out)
		}
		t.Logf("exit %d: %s", code, lastLine(out))
		if cp := readCheckpoint(t, o.Dir); cp == commitGTID {
			t.Fatalf("checkpoint %s moved past the unmatched XA COMMIT", cp)
		}
	})

	t.Run("prepared rows beyond pipeline.max_inflight_events", func(t *testing.T) {
		o := simpleCfg(t, w, kc, w.position())
		o.Extra = "pipeline: {max_inflight_events: 2}\n"
		p := startBinary(t, "run", "--config", writeCfg(t, o))
		xaPrepare(w, "'big'", "b1", "b2", "b3")
		code := p.wait(t, 30*time.Second)
		out := p.output()
		if code == 0 || !strings.Contains(out, "XA transaction") || !strings.Contains(out, "pipeline.max_inflight_events") {
			t.Fatalf("exit %d, want an error naming XA and pipeline.max_inflight_events:\n%s", code, out)
		}
		t.Logf("exit %d: %s", code, lastLine(out))
		w.exec("XA ROLLBACK 'big'")
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// A prepared XA with more rows than one piece (512 events) is held whole, across its pieces,
// and delivered in its row order at XA COMMIT.
func TestXAPreparedLargerThanAPiece(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	startRelay(t, o, daemon.Options{})
	c := newConsumer(t, kc, "t")
	ids := make([]string, 1200)
	for i := range ids {
		ids[i] = fmt.Sprintf("big%04d", i)
	}
	xaPrepare(w, "'big'", ids...)
	w.commit(row{EventID: "m", Key: "k", Topic: "t", Payload: []byte("m")})
	c.waitForEvent("m", 20*time.Second)
	c.settle(300 * time.Millisecond)
	if len(c.got) != 1 {
		t.Fatalf("%d records before XA COMMIT, want only m", len(c.got))
	}
	w.exec("XA COMMIT 'big'")
	rs := c.waitFor(1201, 30*time.Second)
	checkPerKeyOrder(t, rs, append([]string{"m"}, ids...))
}
