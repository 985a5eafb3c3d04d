package e2e

import (
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
		t.Fatalf("outboxd stopped: %v\n%s", err, rl.logs.String())
	default:
	}
	if ids := strings.Join(eventIDs(c.settle(500*time.Millisecond)), ","); ids != "a,b,c" {
		t.Errorf("delivered %s, want a,b,c", ids)
	}
	if strings.Contains(rl.logs.String(), "UPDATEd") {
		t.Errorf("the stop run reported an update:\n%s", rl.logs.String())
	}
}
