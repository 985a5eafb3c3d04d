package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// Two outbox tables and two Kafka clusters, routed by table and topic globs.
func TestRoutingTwoTablesTwoClusters(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(fmt.Sprintf(strings.Replace(outboxDDL, "outbox_event", "billing_outbox", 1), w.schema))
	orders := kafkaCluster(t, "order.created", "order.other")
	billing := kafkaCluster(t, "billing.Invoiced", "billing.misc")
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(),
		Tables: []string{w.schema + ".outbox_event", w.schema + ".billing_outbox"},
		Sinks:  map[string]string{"orders": kafkaSink(orders), "billing": kafkaSink(billing)},
		Routes: fmt.Sprintf(`  - match: {table: "%[1]s.billing_*"}
    sink: billing
    topic: "billing.{event_type}"
  - match: {table: "%[1]s.outbox_event", topic: "order.created"}
    sink: orders
    topic: "{topic}"
  - match: {topic: "order.*"}
    sink: orders
    topic: "order.other"
`, w.schema),
	}
	startRelay(t, o, daemon.Options{})
	w.commit(row{EventID: "o1", Key: "a", Topic: "order.created", Payload: []byte("1")},
		row{EventID: "o2", Key: "a", Topic: "order.shipped", Payload: []byte("2")})
	w.commitTo("billing_outbox", row{EventID: "b1", Key: "a", Topic: "order.created", EventType: str("Invoiced"), Payload: []byte("3")})

	oc := newConsumer(t, orders, "order.created", "order.other")
	bc := newConsumer(t, billing, "billing.Invoiced", "billing.misc")
	got := map[string]string{}
	for _, r := range oc.waitFor(2, 20*time.Second) {
		got[header(r, "event_id")] = "orders/" + r.Topic
	}
	for _, r := range bc.waitFor(1, 20*time.Second) {
		got[header(r, "event_id")] = "billing/" + r.Topic + "/" + header(r, "outbox_table")
	}
	want := map[string]string{"o1": "orders/order.created", "o2": "orders/order.other",
		"b1": "billing/billing.Invoiced/" + w.schema + ".billing_outbox"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routed %v, want %v", got, want)
	}
}

// An unroutable row under on_poison: stop ends the run with an error that names the row and
// the remedies, and the checkpoint stays before it; under dead_letter it goes to the
// dead-letter topic with the reason and the stream goes on.
func TestUnroutableRow(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.created", "outbox.dead_letter")
	base := cfgOpts{
		Srv: w.srv, Start: w.position(), Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": kafkaSink(kc)},
		Routes: "  - match: {topic: \"order.*\"}\n    sink: main\n    topic: \"{topic}\"\n",
	}
	good := w.commit(row{EventID: "ok1", Key: "k", Topic: "order.created", Payload: []byte("1")})
	bad := w.commit(row{EventID: "lost1", Key: "k", Topic: "inventory.changed", Payload: []byte("2")})
	w.commit(row{EventID: "ok2", Key: "k", Topic: "order.created", Payload: []byte("3")})

	t.Run("stop", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		code, out := runBinary(t, "run", "--config", writeCfg(t, o))
		if code == 0 {
			t.Fatalf("outboxd exited 0 on an unroutable row:\n%s", out)
		}
		for _, want := range []string{w.schema + ".outbox_event", "lost1", "inventory.changed", bad, "dead_letter", "route"} {
			if !strings.Contains(out, want) {
				t.Errorf("error output lacks %q:\n%s", want, out)
			}
		}
		if got := readCheckpoint(t, o.Dir); got != good {
			t.Fatalf("checkpoint %q, want %q (the last transaction before the poison row)", got, good)
		}
	})
	t.Run("stop then dead-letter-event", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
		cfgPath := writeCfg(t, o)
		code, out := runBinary(t, "run", "--config", cfgPath)
		if code == 0 || !strings.Contains(out, "--dead-letter-event lost1") {
			t.Fatalf("the stop error does not name the way out (exit %d):\n%s", code, out)
		}
		// The operator's explicit, audited decision: divert exactly that row, go on.
		p := startBinary(t, "run", "--config", cfgPath, "--dead-letter-event", "lost1")
		oc := newConsumer(t, kc, "order.created")
		oc.waitForEvent("ok2", 20*time.Second)
		dl := newConsumer(t, kc, "outbox.dead_letter")
		found := false
		for _, r := range dl.settle(time.Second) {
			found = found || header(r, "event_id") == "lost1"
		}
		if !found {
			t.Fatalf("lost1 was not dead-lettered:\n%s", p.output())
		}
		audit, err := os.ReadFile(filepath.Join(o.Dir, "audit.log"))
		if err != nil || !strings.Contains(string(audit), `"lost1"`) || !strings.Contains(string(audit), "--dead-letter-event") {
			t.Fatalf("audit.log = %q, %v", audit, err)
		}
		if !strings.Contains(p.output(), "operator_override") {
			t.Fatalf("the override is not in the logs:\n%s", p.output())
		}
	})
	t.Run("dead_letter", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.OnPoison = "dead_letter"
		o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
		startRelay(t, o, daemon.Options{})
		dl := newConsumer(t, kc, "outbox.dead_letter")
		rs := dl.waitFor(1, 20*time.Second)
		r := rs[0]
		if header(r, "event_id") != "lost1" || string(r.Value) != "2" || string(r.Key) != "k" {
			t.Fatalf("dead letter %s key %q value %q", header(r, "event_id"), r.Key, r.Value)
		}
		if reason := header(r, "outbox_dead_letter_reason"); !strings.Contains(reason, "no route") {
			t.Fatalf("dead letter reason %q", reason)
		}
		if code := header(r, "outbox_dead_letter_code"); code != "no_route" {
			t.Fatalf("dead letter code %q, want no_route", code)
		}
		oc := newConsumer(t, kc, "order.created")
		oc.waitForEvent("ok2", 20*time.Second)
	})
}
