package router

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
)

// Rows of tables a pattern entry matches are routed by their own schema and table, and take
// the entry's columns and message shape; a listed table keeps its own.
func TestRoutePatternTables(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 1}
tables:
  - table: shop_01.outbox_event
  - pattern: "shop_*.outbox_event"
    columns: {key: aggregate_id}
    empty_payload: tombstone
sinks:
  main: {type: kafka, brokers: ["127.0.0.1:9092"]}
routes:
  - match: {table: "shop_0[0-3].*"}
    sink: main
    topic: "{schema}.{table}.{topic}"
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second round reads the cached decisions
		ev := event()
		ev.Schema, ev.Payload = "shop_02", null
		_, msg, err := r.Route(txn(), ev)
		if err != nil {
			t.Fatalf("shop_02 (pattern, empty_payload: tombstone): %v", err)
		}
		if msg.Topic != "shop_02.outbox_event.order.created" || msg.Value != nil {
			t.Errorf("shop_02: topic %q value %q; want shop_02.outbox_event.order.created and a tombstone", msg.Topic, msg.Value)
		}

		ev = event()
		ev.Schema, ev.Payload = "shop_01", null
		_, _, err = r.Route(txn(), ev)
		if err == nil || !strings.Contains(err.Error(), "NULL") {
			t.Errorf("shop_01 is listed without empty_payload: a NULL payload is poison; err = %v", err)
		}

		ev = event()
		ev.Schema, ev.Key = "shop_03", missing
		_, _, err = r.Route(txn(), ev)
		if err == nil || !strings.Contains(err.Error(), `no column "aggregate_id"`) {
			t.Errorf("shop_03 without its key column: err = %v, want the pattern entry's column named", err)
		}

		ev = event()
		ev.Schema = "shop_17"
		if _, _, err = r.Route(txn(), ev); err == nil || !strings.Contains(err.Error(), ReasonNoRoute) {
			t.Errorf("shop_17 matches no route: err = %v", err)
		}
	}
}
