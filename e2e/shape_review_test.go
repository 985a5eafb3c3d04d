package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// An UPDATE that the checkpoint already covers does not stop a restarted outboxd whose table
// now has on_update: stop (the transaction is before its start position), and UPDATEs of a
// table that is not an outbox table never count, in a transaction of their own or in one with
// outbox rows.
func TestOnUpdateCoveredAndOtherTables(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	table := w.schema + ".outbox_event"
	w.exec("INSERT INTO " + w.schema + ".orders (id, customer) VALUES (1, 'c1')")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{table + "\n    on_update: warn"}
	rl := startRelay(t, o, daemon.Options{})
	w.commit(row{EventID: "a", Key: "k", Topic: "t", Payload: []byte("1")})
	w.exec("UPDATE " + table + " SET payload = 'changed' WHERE event_id = 'a'")
	b := w.commit(row{EventID: "b", Key: "k", Topic: "t", Payload: []byte("2")})
	waitCheckpoint(t, o.Dir, b, 30*time.Second)
	if err := rl.stop(t); err != nil {
		t.Fatalf("stopping the warn run: %v", err)
	}

	o.Tables = []string{table + "\n    on_update: stop"}
	rl = startRelay(t, o, daemon.Options{})
	w.exec("UPDATE " + w.schema + ".orders SET note = 'paid' WHERE id = 1")
	tx, err := w.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"UPDATE " + w.schema + ".orders SET note = 'shipped' WHERE id = 1",
		"INSERT INTO " + table + " (event_id, biz_key, topic, payload) VALUES ('c', 'k', 't', '3')",
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, kc, "t")
	c.waitForEvent("c", 30*time.Second)
	waitCheckpoint(t, o.Dir, w.position(), 30*time.Second)
	select {
	case err := <-rl.done:
		t.Fatalf("outboxd stopped: %v\n%s", err, rl.logText())
	default:
	}
	if ids := strings.Join(eventIDs(c.settle(500*time.Millisecond)), ","); ids != "a,b,c" {
		t.Errorf("delivered %s, want a,b,c", ids)
	}
	if strings.Contains(rl.logText(), "UPDATEd") {
		t.Errorf("the stop run reported an update:\n%s", rl.logText())
	}
}

// README: under on_update: stop "the restart stops there again until on_update is changed":
// a second run with stop exits at the same row, one with warn gets past it and delivers what
// follows, once.
func TestOnUpdateStopRestarts(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	table := w.schema + ".outbox_event"
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{table + "\n    on_update: stop"}
	rl := startRelay(t, o, daemon.Options{})
	first := w.commit(row{EventID: "a", Key: "k", Topic: "t", Payload: []byte("1")})
	waitCheckpoint(t, o.Dir, first, 30*time.Second)
	w.exec("UPDATE " + table + " SET payload = 'changed' WHERE event_id = 'a'")
	upd := w.position()
	w.commit(row{EventID: "b", Key: "k", Topic: "t", Payload: []byte("2")})
	for run := 1; run <= 2; run++ {
		if err := rl.waitExit(t, 30*time.Second); err == nil || !strings.Contains(err.Error(), upd) {
			t.Fatalf("run %d ended with %v, want the update %s named", run, err, upd)
		}
		if got := readCheckpoint(t, o.Dir); got != first {
			t.Fatalf("run %d: checkpoint %s, want %s", run, got, first)
		}
		if run == 1 {
			rl = startRelay(t, o, daemon.Options{})
		}
	}
	o.Tables = []string{table + "\n    on_update: warn"}
	startRelay(t, o, daemon.Options{})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("b", 30*time.Second)
	if ids := strings.Join(eventIDs(c.settle(500*time.Millisecond)), ","); ids != "a,b" {
		t.Errorf("delivered %s, want a,b", ids)
	}
}

// Partitions added to a topic while outboxd runs: a row naming a new one right away is
// delivered there, not stopped as out of range (on_poison: stop) from cached metadata.
func TestShapePartitionAddedWhileRunning(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t)
	adm := adminClient(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "grow"); err != nil {
		t.Fatal(err)
	}
	dt := shapeTable(w, "ev_grow", "DATETIME(3)")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{dt + "\n    columns: {partition: part}"}
	o.OnPoison = "stop"
	rl := startRelay(t, o, daemon.Options{})
	first := insertShape(t, w, dt, "", shapeRow{EventID: "p0", Key: "k", Topic: "grow", Payload: []byte("1"), Part: 0})
	waitCheckpoint(t, o.Dir, first, 30*time.Second)
	if _, err := adm.CreatePartitions(ctx, 2, "grow"); err != nil {
		t.Fatal(err)
	}
	last := insertShape(t, w, dt, "", shapeRow{EventID: "p2", Key: "k", Topic: "grow", Payload: []byte("2"), Part: 2})
	c := newConsumer(t, kc, "grow")
	if r := byEventID(c.waitForEvent("p2", 30*time.Second))["p2"]; r.Partition != 2 {
		t.Errorf("p2 in partition %d, want 2", r.Partition)
	}
	waitCheckpoint(t, o.Dir, last, 30*time.Second)
	select {
	case err := <-rl.done:
		t.Fatalf("outboxd stopped: %v", err)
	default:
	}
}
