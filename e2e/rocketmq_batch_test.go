package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// A catch-up through RocketMQ goes out in batches; batches that fail (an error answer twice,
// a non-OK status after the broker stored it) are resent, and every key still arrives in
// commit order and in one queue, each event with its own properties, and the checkpoint
// reaches the last commit. (A send rarely holds two batches of one queue here; that case is
// TestFailedBatchStopsItsQueue in sink/rocketmq.)
func TestRocketMQBatchFailureKeepsKeyOrder(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"T"}})
	o := rmqCfg(t, w, rc, "  - sink: rmq\n    topic: T\n")
	// Few keys and many rows: a send holds several batches of one key's queue.
	const n, keys = 3000, 3
	var committed []string
	keyOf := map[string]string{}
	var last string
	for i := range n {
		id := fmt.Sprintf("ev%04d", i)
		keyOf[id] = fmt.Sprintf("k%d", i%keys)
		committed = append(committed, id)
		last = w.commit(row{EventID: id, Key: keyOf[id], Topic: "t", Payload: []byte(id)})
	}
	// Committed before outboxd starts, so it catches up in large sends.
	defer rc.Inject(rocketmq.Fault{Topic: "T", Count: 2, Code: rocketmq.CodeSystemBusy,
		Match: func(m rocketmq.Message) bool { return m.Keys == "ev1500" }})()
	defer rc.Inject(rocketmq.Fault{Topic: "T", Count: 1, Code: rocketmq.CodeSlaveNotAvailable, Store: true,
		Match: func(m rocketmq.Message) bool { return m.Keys == "ev2251" }})()
	startRelay(t, o, daemon.Options{})
	waitCheckpoint(t, o.Dir, last, 60*time.Second)
	ms := rc.Messages("T")
	checkRMQKeyOrder(t, ms, committed, keyOf)
	batched := 0
	for _, m := range ms {
		if m.Batch {
			batched++
		}
		if m.Properties["event_id"] != m.Keys || string(m.Body) != m.Keys || m.Properties["SHARDING_KEY"] != keyOf[m.Keys] {
			t.Fatalf("message %s stored with event_id %q, body %q, sharding key %q", m.Keys, m.Properties["event_id"], m.Body, m.Properties["SHARDING_KEY"])
		}
	}
	if batched < n/2 {
		t.Errorf("%d of %d stored messages came in batches, want most", batched, len(ms))
	}
	if len(ms) == n {
		t.Errorf("%d messages stored: the non-OK batch, stored by the broker, should be there twice", len(ms))
	}
}
