package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// Issue 24 item 3, "cleanup, reconcile and backfill keep working" under exactly-once.

// backfill with checkpoint.store: kafka and ha: refused while an outboxd holds the leader lock
// (its check used to pass every kafka store); then it sends at least once (plain records, which
// read_committed consumers see) and writes the snapshot's checkpoint to the Kafka store.
func TestBackfillKafkaStore(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, "")
	useKafkaStore(t, kc, &o, "bf")
	o.Extra += "ha: {enabled: true}\n"
	cfgPath := writeCfg(t, o)
	committed := backfillRefusedWhileLeading(t, w, o, cfgPath, "bf", 20)
	want := w.position()
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	code, out = runBinary(t, "checkpoint", "show", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, `"gtid_set": "`+want+`"`) {
		t.Fatalf("checkpoint show after the backfill: exit %d, want gtid_set %s:\n%s", code, want, out)
	}
	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(rs) >= len(committed) })
	if err != nil {
		t.Fatalf("read_committed consumer saw %d of %d backfilled rows: %v", len(recs), len(committed), err)
	}
	if tl := kafkaread.Count(recs, committed); tl.Duplicates != 0 || len(tl.Lost) != 0 || len(tl.Unexpected) != 0 {
		t.Fatalf("read_committed read-back of the backfill: %+v", tl)
	}
}
