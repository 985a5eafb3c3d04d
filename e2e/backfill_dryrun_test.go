package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// backfill --dry-run prints what its help promises: each matching row as it would be sent
// (event_id, table, sink, topic, key; a poison row with its reason), then the count and the
// snapshot, and sends and saves nothing.
func TestBackfillDryRunPrintsRows(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, c, "latest")
	cfgPath := writeCfg(t, o)
	table := w.schema + ".outbox_event"
	for i := range 4 {
		r := row{EventID: fmt.Sprintf("d%d", i), Key: fmt.Sprintf("k%d", i%2), Topic: "orders", Payload: []byte("x")}
		if i == 3 {
			r.Topic = "" // poison: the topic renders empty
		}
		w.commit(r)
	}
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", table, "--dry-run", "--batch", "2")
	if code != 0 {
		t.Fatalf("backfill --dry-run exited %d:\n%s", code, out)
	}
	want := []string{
		"event_id\ttable\tsink\ttopic\tkey",
		"d0\t" + table + "\tmain\torders\tk0",
		"d1\t" + table + "\tmain\torders\tk1",
		"d2\t" + table + "\tmain\torders\tk0",
		"d3\t" + table + "\t-\tpoison: ",
		table + ": 4 rows match",
		"snapshot: ",
	}
	out = "\n" + out
	at := 0
	for _, line := range want {
		i := strings.Index(out[at:], "\n"+line)
		if i < 0 {
			t.Fatalf("backfill --dry-run output lacks %q (in this order):\n%s", line, out)
		}
		at += i + 1
	}
	if got := readCheckpoint(t, o.Dir); got != "" {
		t.Fatalf("--dry-run saved checkpoint %s", got)
	}
	if n := len(newConsumer(t, c, "orders").settle(500 * time.Millisecond)); n != 0 {
		t.Fatalf("--dry-run sent %d records", n)
	}
}
