package e2e

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// tableHas reports whether schema.table holds a row with event_id id (byte for byte).
func (sw *sweepWorld) tableHas(table, id string) bool {
	sw.t.Helper()
	var n int
	if err := sw.db.QueryRow("SELECT COUNT(*) FROM "+sw.schema+"."+table+" WHERE BINARY event_id = BINARY ?", id).Scan(&n); err != nil {
		sw.t.Fatal(err)
	}
	return n > 0
}

// Two tables route to one topic with the same event ids (ids made per table, such as from its
// AUTO_INCREMENT). A row the relay never saw (sql_log_bin=0) is not proven by the other
// table's message with its id: the sweep keeps it, in either direction, while it deletes the
// delivered twin.
func TestSweepProofIsPerTable(t *testing.T) {
	sw := newSweepWorld(t, "")
	r := startRelay(t, sw.o, daemon.Options{})
	sw.insert(
		ins{table: "outbox_event", id: "same-1", topic: "t", bin: true},
		ins{table: "ts_outbox", id: "same-1", topic: "t"},
		ins{table: "ts_outbox", id: "same-2", topic: "t", bin: true},
		ins{table: "outbox_event", id: "same-2", topic: "t"},
	)
	sw.c.waitFor(2, time.Minute)
	deadline := time.Now().Add(time.Minute)
	for sw.tableHas("outbox_event", "same-1") || sw.tableHas("ts_outbox", "same-2") {
		if time.Now().After(deadline) {
			t.Fatalf("the delivered rows were not swept within a minute:\n%s", r.logText())
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a few more rounds
	if !sw.tableHas("ts_outbox", "same-1") {
		t.Error("ts_outbox's same-1, never relayed, was deleted on the proof of outbox_event's message")
	}
	if !sw.tableHas("outbox_event", "same-2") {
		t.Error("outbox_event's same-2, never relayed, was deleted on the proof of ts_outbox's message")
	}
}

// One table repeats an event id: a row the relay never saw (sql_log_bin=0, stamped 30 hours
// back, so that it falls in a slice of its own) and a later one that was delivered. The later
// row's one message is no proof for both: the sweep deletes neither twin (it cannot tell
// which one the message is of), while it deletes a delivered row beside them.
func TestSweepRepeatedEventIDNeedsACopyPerRow(t *testing.T) {
	sw := newSweepWorld(t, "")
	r := startRelay(t, sw.o, daemon.Options{})
	sw.insert(
		ins{table: "ts_outbox", id: "twin", topic: "t", createdAt: "NOW(6) - INTERVAL 30 HOUR"},
		ins{table: "ts_outbox", id: "twin", topic: "t", bin: true},
		ins{table: "ts_outbox", id: "other", topic: "t", bin: true},
	)
	sw.c.waitFor(2, time.Minute)
	deadline := time.Now().Add(time.Minute)
	for sw.tableHas("ts_outbox", "other") {
		if time.Now().After(deadline) {
			t.Fatalf("the delivered row was not swept within a minute:\n%s", r.logText())
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a few more rounds
	var n int
	if err := sw.db.QueryRow("SELECT COUNT(*) FROM " + sw.schema + ".ts_outbox WHERE event_id = 'twin'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d of the two rows with event id twin left, want both: one message proved two rows", n)
	}
}
