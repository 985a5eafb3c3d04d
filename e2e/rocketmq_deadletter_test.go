package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// A dead letter to a RocketMQ sink carries the code, the reason and the original topic as user
// properties, as the Kafka headers do.
func TestRocketMQDeadLetterCode(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"PAY_EVENT", "OUTBOX_DLQ"}})
	o := rmqCfg(t, w, rc, "  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n")
	o.OnPoison = "dead_letter"
	o.DeadLetter = "{sink: rmq, topic: OUTBOX_DLQ}"
	startRelay(t, o, daemon.Options{})

	w.commit(row{EventID: "lost-1", Key: "acct-1", Topic: "inventory.changed", Payload: []byte(`{}`)})
	w.commit(row{EventID: "p1", Key: "acct-1", Topic: "pay.succeeded", Payload: []byte(`{}`)})
	waitRMQ(t, rc, "PAY_EVENT", 1, 30*time.Second)
	ms := waitRMQ(t, rc, "OUTBOX_DLQ", 1, 30*time.Second)
	p := ms[0].Properties
	if ms[0].Keys != "lost-1" || p["outbox_dead_letter_code"] != "no_route" || !strings.Contains(p["outbox_dead_letter_reason"], "no route") ||
		p["outbox_original_topic"] != "inventory.changed" {
		t.Fatalf("dead letter keys %q properties %v; want lost-1 with code no_route", ms[0].Keys, p)
	}
}
