package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// Committed transactions with several outbox rows arrive as exactly those messages, per key in
// commit order, with key, value, headers and timestamp mapped, UTF-8 and binary intact.
func TestDeliveryMapping(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.created", "order.paid")
	start := w.position()
	startRelay(t, simpleCfg(t, w, kc, start), daemon.Options{})

	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	utf8 := []byte(`{"name":"张三 🚀 Müller","note":"ünïcödé ✓"}`)
	before := time.Now().Truncate(time.Second)
	g1 := w.commit(
		row{EventID: "e1", Key: "alice", Topic: "order.created", EventType: str("OrderCreated"), Payload: utf8,
			Headers: str(`{"trace_id":"abc","attempt":3,"nested":{"a":[1,true]},"event_id":"spoofed","flag":false}`)},
		row{EventID: "e2", Key: "bob", Topic: "order.created", Payload: binary},
		row{EventID: "e3", Key: "alice", Topic: "order.paid", EventType: str("OrderPaid"), Payload: []byte(`{"n":3}`)},
	)
	var want []string
	for i := 4; i <= 30; i++ {
		key := []string{"alice", "bob", "carol"}[i%3]
		w.commit(row{EventID: fmt.Sprintf("e%d", i), Key: key, Topic: "order.created", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	for i := 1; i <= 30; i++ {
		want = append(want, fmt.Sprintf("e%d", i))
	}

	c := newConsumer(t, kc, "order.created", "order.paid")
	rs := c.waitFor(30, 30*time.Second)
	rs = c.settle(300 * time.Millisecond)
	if len(rs) != 30 {
		t.Fatalf("got %d records, want exactly 30: %v", len(rs), eventIDs(rs))
	}
	checkPerKeyOrder(t, rs, want)

	byID := map[string]int{}
	for i, r := range rs {
		byID[header(r, "event_id")] = i
	}
	r1 := rs[byID["e1"]]
	if string(r1.Key) != "alice" || r1.Topic != "order.created" || !bytes.Equal(r1.Value, utf8) {
		t.Fatalf("e1: topic %s key %q value %q", r1.Topic, r1.Key, r1.Value)
	}
	wantHeaders := [][2]string{
		{"event_id", "e1"}, {"event_type", "OrderCreated"}, {"outbox_table", w.schema + ".outbox_event"},
		{"outbox_gtid", g1}, {"trace_id", "abc"}, {"attempt", "3"}, {"nested", `{"a":[1,true]}`}, {"flag", "false"},
	}
	if len(r1.Headers) != len(wantHeaders) {
		t.Fatalf("e1 headers %v, want %v", r1.Headers, wantHeaders)
	}
	for i, h := range wantHeaders {
		if r1.Headers[i].Key != h[0] || string(r1.Headers[i].Value) != h[1] {
			t.Fatalf("e1 header %d = %s:%s, want %s:%s", i, r1.Headers[i].Key, r1.Headers[i].Value, h[0], h[1])
		}
	}
	if ts := r1.Timestamp; ts.Before(before) || ts.After(time.Now()) {
		t.Fatalf("e1 timestamp %v is not the commit time (committed after %v)", ts, before)
	}
	r2 := rs[byID["e2"]]
	if !bytes.Equal(r2.Value, binary) {
		t.Fatalf("binary payload changed: % x", r2.Value)
	}
	if header(r2, "event_type") != "" {
		t.Fatal("e2 has an event_type header though its column is NULL")
	}
	for _, h := range r2.Headers {
		if h.Key == "event_type" {
			t.Fatal("e2 has an event_type header though its column is NULL")
		}
	}
	if r3 := rs[byID["e3"]]; r3.Topic != "order.paid" || header(r3, "outbox_gtid") != g1 {
		t.Fatalf("e3: topic %s gtid %s", r3.Topic, header(r3, "outbox_gtid"))
	}
}

// A rolled-back transaction, UPDATE and DELETE of outbox rows and writes to other tables send
// nothing, and such transactions still move the checkpoint.
func TestOnlyCommittedInsertsAreSent(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	r := startRelay(t, o, daemon.Options{})

	w.commit(row{EventID: "first", Key: "k", Topic: "t", Payload: []byte("1")})
	tx, err := w.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES ('rolled-back','k','t','x')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	w.exec("UPDATE " + w.schema + ".outbox_event SET payload = 'changed' WHERE event_id = 'first'")
	w.exec("DELETE FROM " + w.schema + ".outbox_event WHERE event_id = 'first'")
	w.exec("INSERT INTO " + w.schema + ".orders (customer, note) VALUES ('x', 'other table')")
	w.exec("CREATE TABLE " + w.schema + ".other (id INT PRIMARY KEY)")
	w.exec("INSERT INTO " + w.schema + ".other VALUES (1)")
	last := w.commit(row{EventID: "last", Key: "k", Topic: "t", Payload: []byte("2")})
	quiet := w.position() // nothing after "last" but more writes elsewhere:
	w.exec("INSERT INTO " + w.schema + ".orders (customer) VALUES ('busy')")
	busy := w.position()
	if busy == quiet {
		t.Fatal("the other-table write did not move the server position")
	}

	c := newConsumer(t, kc, "t")
	c.waitForEvent("last", 20*time.Second)
	rs := c.settle(300 * time.Millisecond)
	if got := fmt.Sprint(eventIDs(rs)); got != "[first last]" {
		t.Fatalf("got %s, want [first last]", got)
	}
	if string(rs[0].Value) != "1" {
		t.Fatalf("first's value %q: the UPDATE leaked", rs[0].Value)
	}
	_ = last
	// The checkpoint reaches the other-table transaction after the last outbox row.
	waitCheckpoint(t, o.Dir, busy, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A non-transactional outbox table (MyISAM) ends its binlog transaction with a COMMIT query
// instead of an XID: its rows are delivered and the checkpoint passes them.
func TestNonTransactionalOutboxTable(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(fmt.Sprintf(strings.Replace(outboxDDL, "outbox_event", "outbox_myisam", 1), w.schema) + " ENGINE=MyISAM")
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{w.schema + ".outbox_myisam"}
	startRelay(t, o, daemon.Options{})
	w.exec("INSERT INTO "+w.schema+".outbox_myisam (event_id, biz_key, topic, payload) VALUES (?,?,?,?), (?,?,?,?)",
		"m1", "k", "t", "a", "m2", "k", "t", "b")
	g := w.position()
	c := newConsumer(t, kc, "t")
	rs := c.waitFor(2, 20*time.Second)
	if got := fmt.Sprint(eventIDs(rs)); got != "[m1 m2]" {
		t.Fatalf("got %s", got)
	}
	waitCheckpoint(t, o.Dir, g, 10*time.Second)
}

// A transaction far larger than the pipeline's capacity streams through in pieces: every row
// arrives in per-key order, and the checkpoint moves past it only at the end.
func TestLargeTransactionStreamsThroughBoundedPipeline(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = "pipeline: {max_inflight_events: 300, max_inflight_bytes: 1048576}\n"
	startRelay(t, o, daemon.Options{})

	const n = 5000
	tx, err := w.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var committed []string
	for i := 0; i < n; i += 500 {
		var q strings.Builder
		var args []any
		q.WriteString("INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES ")
		for j := i; j < i+500; j++ {
			if j > i {
				q.WriteString(",")
			}
			q.WriteString("(?,?,?,?)")
			id := fmt.Sprintf("big%05d", j)
			committed = append(committed, id)
			args = append(args, id, fmt.Sprintf("k%d", j%13), "t", strings.Repeat("x", 200))
		}
		if _, err := tx.Exec(q.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	g := w.position()
	c := newConsumer(t, kc, "t")
	rs := c.waitFor(n, 60*time.Second)
	checkPerKeyOrder(t, rs, committed)
	waitCheckpoint(t, o.Dir, g, 10*time.Second)
}
