package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// Under exactly-once a row the broker can never take (larger than max_message_bytes) dooms its
// Kafka transaction; with on_poison: dead_letter outboxd aborts it, streams again from the
// committed checkpoint with that row diverted, and goes on: the row is in the dead-letter
// topic once, every other row in t once, and nothing of the aborted transaction is visible.
func TestExactlyOnceRejectedRowDeadLettered(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t", "dlq")
	o := simpleCfg(t, w, kc, w.position())
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 4096}", kc.ListenAddrs()[0])}
	o.Routes = "  - sink: main\n    topic: t\n"
	o.OnPoison, o.DeadLetter = "dead_letter", "{sink: main, topic: dlq}"
	useKafkaStore(t, kc, &o, "poison")
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})

	var ids []string
	rowOf := func(id string, size int) row {
		p, _ := json.Marshal(eoPayload{ID: id, Key: "k", Seq: len(ids)})
		if size > len(p) {
			p, _ = json.Marshal(map[string]any{"id": id, "k": "k", "s": len(ids), "pad": strings.Repeat("x", size)})
		}
		return row{EventID: id, Key: "k", Topic: "t", Payload: p}
	}
	for i := range 5 {
		id := fmt.Sprintf("ok%d", i)
		w.commit(rowOf(id, 0))
		ids = append(ids, id)
	}
	// The big row shares its source transaction with a good one: both are in the aborted
	// Kafka transaction, and both come again, the big one as a dead letter.
	w.commit(rowOf("ok5", 0), rowOf("big", 8000))
	ids = append(ids, "ok5")
	for i := 6; i < 10; i++ {
		id := fmt.Sprintf("ok%d", i)
		w.commit(rowOf(id, 0))
		ids = append(ids, id)
	}

	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "t", "dlq")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	want := append(append([]string(nil), ids...), "big")
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs := rd.Records()
		tl := kafkaread.Count(recs, want)
		if len(tl.Lost) == 0 {
			if tl.Duplicates != 0 || len(tl.Unexpected) != 0 {
				t.Fatalf("read_committed: %d duplicates, unexpected %v", tl.Duplicates, tl.Unexpected)
			}
			for _, rec := range recs {
				if want := map[bool]string{true: "dlq", false: "t"}[rec.EventID == "big"]; rec.Topic != want {
					// Only the refused row is diverted: the rows after it with the same key
					// failed with it in the aborted transaction, and are sent again, not
					// dead-lettered.
					t.Fatalf("event %s arrived in %s, want %s", rec.EventID, rec.Topic, want)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("missing after 30 s: %v\n%s", tl.Lost, r.logs.String())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		rd.Poll(ctx)
		cancel()
	}
	if logs := r.logs.String(); !strings.Contains(logs, "kafka transaction aborted") {
		t.Fatalf("no abort logged:\n%s", logs)
	}
}
