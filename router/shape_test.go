package router

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink"
)

const shapeConfig = `
source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 1}
tables:
  - table: shop.outbox_event
    columns: {timestamp: occurred_at, partition: part}
    timestamp_zone: Europe/Berlin
    extra_headers: {trace: traceparent, state: tracestate}
    empty_payload: tombstone
  - table: shop.strict
    empty_payload: poison
sinks:
  main: {type: kafka, brokers: ["127.0.0.1:9092"]}
routes:
  - match: {topic: "ce.*"}
    sink: main
    format: cloudevents
    cloudevents: {source: /shop/orders, content_type: application/vnd.shop+json}
  - match: {topic: "cedef.*"}
    sink: main
    format: cloudevents
    cloudevents: {type: shop.Default}
  - sink: main
`

func newShapeRouter(t *testing.T) *Router {
	t.Helper()
	cfg, err := config.Parse([]byte(shapeConfig))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func shapedEvent() *binlog.Event {
	ev := event()
	ev.Timestamp = field("2026-03-01 10:00:00.123")
	ev.Partition = field("2")
	// ExtraHeaderColumns sorts by column: state, trace.
	ev.Extra = []binlog.Field{field("k=v"), field("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
	return ev
}

func TestShapeOptions(t *testing.T) {
	r := newShapeRouter(t)
	_, msg, err := r.Route(txn(), shapedEvent())
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 1, 9, 0, 0, 123e6, time.UTC); !msg.Time.Equal(want) {
		t.Errorf("time %s, want %s (10:00 in Berlin, UTC+1 in March)", msg.Time, want)
	}
	if !msg.HasPartition || msg.Partition != 2 {
		t.Errorf("partition %d (set %v), want 2", msg.Partition, msg.HasPartition)
	}
	hs := headerMap(msg.Headers)
	for _, want := range []string{"tracestate=k=v", "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if !slices.Contains(hs, want) {
			t.Errorf("headers %v lack %s", hs, want)
		}
	}

	cases := []struct {
		name   string
		edit   func(ev *binlog.Event)
		check  func(t *testing.T, m *sink.Message)
		poison string
	}{
		{"epoch millis", func(ev *binlog.Event) { ev.Timestamp = field("1767225600123") }, func(t *testing.T, m *sink.Message) {
			if !m.Time.Equal(time.UnixMilli(1767225600123)) {
				t.Errorf("time %s", m.Time)
			}
		}, ""},
		{"NULL timestamp keeps the commit time", func(ev *binlog.Event) { ev.Timestamp = null }, func(t *testing.T, m *sink.Message) {
			if !m.Time.Equal(commit) {
				t.Errorf("time %s, want the commit time", m.Time)
			}
		}, ""},
		{"NULL partition goes by key", func(ev *binlog.Event) { ev.Partition = null }, func(t *testing.T, m *sink.Message) {
			if m.HasPartition {
				t.Errorf("partition %d set", m.Partition)
			}
		}, ""},
		{"NULL extra column adds no header", func(ev *binlog.Event) { ev.Extra[0] = null }, func(t *testing.T, m *sink.Message) {
			if slices.ContainsFunc(m.Headers, func(h sink.Header) bool { return h.Key == "tracestate" }) {
				t.Errorf("headers %v", headerMap(m.Headers))
			}
		}, ""},
		{"empty payload is a tombstone", func(ev *binlog.Event) { ev.Payload = field("") }, func(t *testing.T, m *sink.Message) {
			if m.Value != nil || string(m.Key) != "order-9" {
				t.Errorf("value %q (nil %v), key %q", m.Value, m.Value == nil, m.Key)
			}
		}, ""},
		{"NULL payload is a tombstone", func(ev *binlog.Event) { ev.Payload = null }, func(t *testing.T, m *sink.Message) {
			if m.Value != nil {
				t.Errorf("value %q", m.Value)
			}
		}, ""},
		{"keyless tombstone", func(ev *binlog.Event) { ev.Payload = null; ev.Key = null }, nil, "keyless tombstone"},
		{"negative partition", func(ev *binlog.Event) { ev.Partition = field("-1") }, nil, "not a partition number"},
		{"huge partition", func(ev *binlog.Event) { ev.Partition = field("4294967296") }, nil, "not a partition number"},
		{"bad time", func(ev *binlog.Event) { ev.Timestamp = field("0000-00-00 00:00:00") }, nil, "not a DATETIME"},
		{"negative millis", func(ev *binlog.Event) { ev.Timestamp = field("-5") }, nil, "negative"},
		{"missing extra column", func(ev *binlog.Event) { ev.Extra = nil }, nil, "extra_headers"},
		{"missing partition column", func(ev *binlog.Event) { ev.Partition = missing }, nil, "not in the table"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := shapedEvent()
			c.edit(ev)
			_, m, err := r.Route(txn(), ev)
			if c.poison != "" {
				var pe *PoisonError
				if !errors.As(err, &pe) || !strings.Contains(pe.Reason, c.poison) {
					t.Fatalf("err %v, want poison with %q", err, c.poison)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, m)
		})
	}
}

func TestEmptyPayloadPoisonAndSend(t *testing.T) {
	r := newShapeRouter(t)
	ev := event()
	ev.Table = "strict"
	ev.Payload = field("")
	var pe *PoisonError
	if _, _, err := r.Route(txn(), ev); !errors.As(err, &pe) || !strings.Contains(pe.Reason, "empty_payload: poison") {
		t.Fatalf("err %v", err)
	}
	// Without options (the default send) an empty payload is sent as an empty value.
	plain := newRouter(t, "routes:\n  - sink: main\n")
	ev = event()
	ev.Payload = field("")
	_, m, err := plain.Route(txn(), ev)
	if err != nil || m.Value == nil || len(m.Value) != 0 {
		t.Fatalf("err %v value %v", err, m)
	}
}

func TestCloudEventsHeaders(t *testing.T) {
	r := newShapeRouter(t)
	ev := shapedEvent()
	ev.Topic = field("ce.order")
	ev.Headers = field(`{"ce_id":"spoof","content-type":"text/plain","ce_subject":"order-9"}`)
	_, m, err := r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	got := headerLists(m.Headers)
	want := map[string]string{
		"ce_specversion": "1.0", "ce_id": "e-1", "ce_type": "OrderCreated", "ce_source": "/shop/orders",
		"ce_time": "2026-03-01T09:00:00.123Z", "content-type": "application/vnd.shop+json", "ce_subject": "order-9",
	}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("header %s = %q, want [%q]", k, got[k], v)
		}
	}

	ev = event()
	ev.Table = "strict"
	ev.Topic = field("ce.order")
	ev.EventType = null
	var pe *PoisonError
	if _, _, err := r.Route(txn(), ev); !errors.As(err, &pe) || !strings.Contains(pe.Reason, "cloudevents.type") {
		t.Fatalf("a row without event_type: err %v, want poison", err)
	}
	ev.Topic = field("cedef.order")
	_, m, err = r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	got = headerLists(m.Headers)
	if got["ce_type"][0] != "shop.Default" || got["ce_source"][0] != "/outboxd/shop.strict" || got["content-type"][0] != "application/json" ||
		got["ce_time"][0] != "2025-03-04T05:06:07Z" {
		t.Fatalf("defaults: %v", got)
	}
}

// The router's own header names are the ones config refuses in extra_headers.
func TestReservedHeaders(t *testing.T) {
	for _, h := range []string{HeaderEventID, HeaderEventType, HeaderTable, HeaderGTID, HeaderDeadLetterReason, HeaderDeadLetterCode, HeaderOriginalTopic} {
		if !config.ReservedHeader(h) {
			t.Errorf("%s is not config.ReservedHeader", h)
		}
	}
	for _, h := range []string{HeaderCESpecVersion, HeaderCEID, HeaderCEType, HeaderCESource, HeaderCETime, HeaderContentType} {
		if !config.CloudEventsHeader(h) {
			t.Errorf("%s is not config.CloudEventsHeader", h)
		}
	}
}
