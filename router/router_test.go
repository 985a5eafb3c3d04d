package router

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink"
)

const baseConfig = `
source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 1}
tables:
  - table: shop.outbox_event
    columns: {key: biz_key}
  - table: shop.outbox_legacy
  - table: billing.outbox
sinks:
  main: {type: kafka, brokers: ["127.0.0.1:9092"]}
  other: {type: kafka, brokers: ["127.0.0.1:9093"]}
  mq: {type: rocketmq, nameservers: ["127.0.0.1:9876"]}
`

func newRouter(t testing.TB, routes string) *Router {
	t.Helper()
	cfg, err := config.Parse([]byte(baseConfig + routes))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func field(s string) binlog.Field { return binlog.Field{Bytes: []byte(s)} }

var (
	null    = binlog.Field{Null: true}
	missing = binlog.Field{Missing: true}
)

var commit = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func txn() *binlog.Txn { return &binlog.Txn{GTID: "0-1-42", CommitTime: commit} }

func event() *binlog.Event {
	return &binlog.Event{
		Schema: "shop", Table: "outbox_event", ID: "17",
		EventID:   field("e-1"),
		Key:       field("order-9"),
		Topic:     field("order.created"),
		Payload:   field(`{"id":9}`),
		EventType: field("OrderCreated"),
		Headers:   null,
	}
}

func headerMap(hs []sink.Header) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Key + "=" + string(h.Value)
	}
	return out
}

func TestRouteMessage(t *testing.T) {
	r := newRouter(t, `routes:
  - match: {table: "shop.*", topic: "order.*"}
    sink: main
    topic: "{schema}.{table}.{topic}.{event_type}"
`)
	ev := event()
	// Binary and UTF-8 bytes must pass through untouched, including invalid UTF-8 and NUL.
	ev.Payload = binlog.Field{Bytes: append([]byte("订单 ünïcode \x00\xff\xfe"), 0x80)}
	ev.Key = binlog.Field{Bytes: []byte{0x00, 0xc3, 0x28, 'k'}}
	ev.Headers = field(`{"trace_id": "abc", "n": 1}`)
	name, msg, err := r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	want := &sink.Message{
		Topic: "shop.outbox_event.order.created.OrderCreated",
		Key:   []byte{0x00, 0xc3, 0x28, 'k'},
		Value: append([]byte("订单 ünïcode \x00\xff\xfe"), 0x80),
		Headers: []sink.Header{
			{Key: "event_id", Value: []byte("e-1")},
			{Key: "event_type", Value: []byte("OrderCreated")},
			{Key: "outbox_table", Value: []byte("shop.outbox_event")},
			{Key: "outbox_gtid", Value: []byte("0-1-42")},
			{Key: "trace_id", Value: []byte("abc")},
			{Key: "n", Value: []byte("1")},
		},
		Time:    commit,
		EventID: "e-1",
		Tag:     "OrderCreated",
	}
	if name != "main" || !reflect.DeepEqual(msg, want) {
		t.Errorf("got %q %#v\nwant %#v", name, msg, want)
	}
}

func TestNullAndEmptyValues(t *testing.T) {
	r := newRouter(t, "routes: [{sink: main}]\n")

	ev := event()
	ev.Key, ev.EventType = null, null
	_, msg, err := r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Key != nil {
		t.Errorf("NULL key = %q, want nil", msg.Key)
	}
	if got := headerMap(msg.Headers); !reflect.DeepEqual(got, []string{"event_id=e-1", "outbox_table=shop.outbox_event", "outbox_gtid=0-1-42"}) {
		t.Errorf("headers without event_type = %q", got)
	}
	if msg.Tag != "" {
		t.Errorf("tag = %q", msg.Tag)
	}

	ev = event()
	ev.Key, ev.Payload, ev.EventType, ev.Headers = binlog.Field{}, binlog.Field{}, missing, missing
	_, msg, err = r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	// Empty but not NULL: a non-nil empty key and value, unlike NULL (no key) or a tombstone.
	if msg.Key == nil || len(msg.Key) != 0 || msg.Value == nil || len(msg.Value) != 0 {
		t.Errorf("empty key/value = %#v / %#v", msg.Key, msg.Value)
	}
	if len(msg.Headers) != 3 {
		t.Errorf("headers with event_type and headers absent = %q", headerMap(msg.Headers))
	}

	// A key column the table lacks is poison; a NULL key (above) is not.
	ev = event()
	ev.Key = missing
	if _, _, err := r.Route(txn(), ev); !isPoison(err) {
		t.Errorf("missing key column: %v", err)
	}
}

func isPoison(err error) bool {
	var pe *PoisonError
	return errors.As(err, &pe)
}

func TestHeadersColumn(t *testing.T) {
	r := newRouter(t, "routes: [{sink: main}]\n")
	cases := []struct {
		name, headers string
		want          []string
	}{
		{"order kept and types as JSON text",
			`{"z": "last-first", "a": 1.50, "m": true, "o": { "x" : [1, 2, {"y": null}] }, "nil": null, "neg": -3e2, "s": "tab\tq\"\u00e9"}`,
			[]string{"z=last-first", "a=1.50", "m=true", `o={"x":[1,2,{"y":null}]}`, "nil=null", "neg=-3e2", "s=tab\tq\"é"}},
		{"reserved names never override",
			`{"event_id": "evil", "event_type": "x", "outbox_table": "x", "outbox_gtid": "x", "outbox_dead_letter_reason": "x", "outbox_original_topic": "x", "Event_ID": "kept"}`,
			[]string{"Event_ID=kept"}},
		{"duplicates and empty keys kept", `{"a": "1", "a": "2", "": "e"}`, []string{"a=1", "a=2", "=e"}},
		{"empty object", `{}`, nil},
		{"blank", " \n\t", nil},
		{"empty", "", nil},
		{"surrounding space", "  {\"k\":\"v\"}\n ", []string{"k=v"}},
	}
	base := []string{"event_id=e-1", "event_type=OrderCreated", "outbox_table=shop.outbox_event", "outbox_gtid=0-1-42"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := event()
			ev.Headers = field(tc.headers)
			_, msg, err := r.Route(txn(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := headerMap(msg.Headers), append(append([]string{}, base...), tc.want...); !reflect.DeepEqual(got, want) {
				t.Errorf("headers\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestPoison(t *testing.T) {
	r := newRouter(t, `routes:
  - {match: {topic: "empty.*"}, sink: main, topic: "{event_type}"}
  - {sink: main}
`)
	cases := []struct {
		name   string
		edit   func(*binlog.Event)
		reason string
	}{
		{"event_id column missing", func(e *binlog.Event) { e.EventID = missing }, `no column "event_id" (tables[].columns.event_id)`},
		{"key column missing", func(e *binlog.Event) { e.Key = missing }, `no column "biz_key" (tables[].columns.key)`},
		{"topic column missing", func(e *binlog.Event) { e.Topic = missing }, `no column "topic"`},
		{"payload column missing", func(e *binlog.Event) { e.Payload = missing }, `no column "payload"`},
		{"NULL event_id", func(e *binlog.Event) { e.EventID = null }, `event id column "event_id" is NULL`},
		{"NULL topic", func(e *binlog.Event) { e.Topic = null }, `topic column "topic" is NULL`},
		{"empty topic", func(e *binlog.Event) { e.Topic = field("") }, `topic column "topic" is empty`},
		{"NULL payload", func(e *binlog.Event) { e.Payload = null }, `payload column "payload" is NULL`},
		{"headers array", func(e *binlog.Event) { e.Headers = field(`["a"]`) }, `headers column is not a JSON object (it starts with "[")`},
		{"headers string", func(e *binlog.Event) { e.Headers = field(`"a"`) }, `not a JSON object (it starts with a string)`},
		{"headers invalid", func(e *binlog.Event) { e.Headers = field(`{"a": }`) }, `headers column is not valid JSON`},
		{"headers truncated", func(e *binlog.Event) { e.Headers = field(`{"a": "b"`) }, `headers column is not valid JSON`},
		{"headers trailing", func(e *binlog.Event) { e.Headers = field(`{"a": "b"} {}`) }, `data after the JSON object`},
		{"rendered topic empty", func(e *binlog.Event) { e.Topic = field("empty.x"); e.EventType = null }, `routes[0] renders topic template "{event_type}" to an empty topic`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := event()
			tc.edit(ev)
			name, msg, err := r.Route(txn(), ev)
			var pe *PoisonError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *PoisonError", err)
			}
			if name != "" || msg != nil {
				t.Errorf("poison returned %q %+v", name, msg)
			}
			if !strings.Contains(pe.Reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", pe.Reason, tc.reason)
			}
			if pe.Schema != "shop" || pe.Table != "outbox_event" || pe.ID != "17" || pe.GTID != "0-1-42" {
				t.Errorf("poison fields = %+v", pe)
			}
			msgText := err.Error()
			for _, w := range []string{"shop.outbox_event", "id 17", "gtid 0-1-42", "on_poison: dead_letter", tc.reason} {
				if !strings.Contains(msgText, w) {
					t.Errorf("error %q does not mention %q", msgText, w)
				}
			}
		})
	}
}

func TestMatching(t *testing.T) {
	r := newRouter(t, `routes:
  - {match: {table: "shop.outbox_event", topic: "order.*"}, sink: main, topic: "first"}
  - {match: {topic: "order.*"}, sink: other, topic: "topic-only"}
  - {match: {table: "billing.*"}, sink: mq, topic: "table-only", tag: "{table}-{event_type}"}
  - {match: {table: "shop.outbox_leg?cy", topic: "pay[0-9]"}, sink: other, topic: "both"}
`)
	cases := []struct {
		table, topic string
		sink, dest   string
	}{
		{"outbox_event", "order.created", "main", "first"},        // first match wins over the topic-only route
		{"outbox_legacy", "order.created", "other", "topic-only"}, // table glob of route 0 fails
		{"outbox_event", "order/created", "", ""},                 // path.Match: * does not cross '/'
		{"outbox_legacy", "pay7", "other", "both"},                // both globs
		{"outbox_legacy", "pay77", "", ""},                        // [0-9] is one character
	}
	for _, tc := range cases {
		ev := event()
		ev.Table, ev.Topic = tc.table, field(tc.topic)
		name, msg, err := r.Route(txn(), ev)
		if tc.sink == "" {
			var pe *PoisonError
			if !errors.As(err, &pe) || pe.Reason != ReasonNoRoute || pe.Topic != tc.topic || pe.EventID != "e-1" {
				t.Errorf("%s/%s: err = %v, want no-route poison", tc.table, tc.topic, err)
			} else if !strings.Contains(err.Error(), "add a route matching it, or set on_poison: dead_letter") {
				t.Errorf("no-route error lacks the remedy: %v", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s/%s: %v", tc.table, tc.topic, err)
			continue
		}
		if name != tc.sink || msg.Topic != tc.dest {
			t.Errorf("%s/%s routed to %s/%s, want %s/%s", tc.table, tc.topic, name, msg.Topic, tc.sink, tc.dest)
		}
	}

	ev := event()
	ev.Schema, ev.Table, ev.Topic = "billing", "outbox", field("anything")
	name, msg, err := r.Route(txn(), ev)
	if err != nil || name != "mq" || msg.Topic != "table-only" || msg.Tag != "outbox-OrderCreated" {
		t.Errorf("table-only route: %q %+v %v", name, msg, err)
	}
}

func TestDeadLetter(t *testing.T) {
	r := newRouter(t, `routes: [{match: {topic: "order.*"}, sink: main}]
on_poison: dead_letter
dead_letter: {sink: other, topic: outbox.dlq}
`)
	ev := event()
	ev.Topic = field("invoice.sent")
	ev.Headers = field(`{"trace": "t1", "outbox_dead_letter_reason": "forged", "outbox_dead_letter_code": "forged"}`)
	_, _, perr := r.Route(txn(), ev)
	if !isPoison(perr) {
		t.Fatalf("want poison, got %v", perr)
	}
	name, msg, err := r.DeadLetter(txn(), ev, "no_route", perr)
	if err != nil {
		t.Fatal(err)
	}
	if name != "other" || msg.Topic != "outbox.dlq" || string(msg.Key) != "order-9" || string(msg.Value) != `{"id":9}` ||
		msg.EventID != "e-1" || !msg.Time.Equal(commit) {
		t.Errorf("dead letter = %q %+v", name, msg)
	}
	want := []string{"event_id=e-1", "event_type=OrderCreated", "outbox_table=shop.outbox_event", "outbox_gtid=0-1-42",
		"trace=t1", "outbox_dead_letter_code=no_route", "outbox_dead_letter_reason=" + perr.Error(), "outbox_original_topic=invoice.sent"}
	if got := headerMap(msg.Headers); !reflect.DeepEqual(got, want) {
		t.Errorf("headers\n got %q\nwant %q", got, want)
	}

	// A malformed row still becomes a dead letter: NULL columns are left out, bad headers dropped.
	ev = event()
	ev.EventID, ev.Key, ev.Payload, ev.Topic, ev.Headers = null, null, null, null, field("[1]")
	_, _, perr = r.Route(txn(), ev)
	if !isPoison(perr) {
		t.Fatalf("want poison, got %v", perr)
	}
	_, msg, err = r.DeadLetter(txn(), ev, "malformed", perr)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"event_type=OrderCreated", "outbox_table=shop.outbox_event", "outbox_gtid=0-1-42",
		"outbox_dead_letter_code=malformed", "outbox_dead_letter_reason=" + perr.Error(), "outbox_original_topic="}
	if got := headerMap(msg.Headers); !reflect.DeepEqual(got, want) || msg.Key != nil || msg.Value != nil {
		t.Errorf("malformed dead letter: key %q value %q headers %q", msg.Key, msg.Value, got)
	}

	// A send failure (not poison) can be dead-lettered too; a nil reason and an empty code are
	// still explained.
	_, msg, err = r.DeadLetter(txn(), event(), "", nil)
	if h := headerMap(msg.Headers); err != nil || h[4] != "outbox_dead_letter_code=unknown" || h[5] != "outbox_dead_letter_reason=unknown" {
		t.Errorf("nil reason: %v %q", err, h)
	}

	noDL := newRouter(t, "routes: [{sink: main}]\n")
	if _, _, err := noDL.DeadLetter(txn(), event(), "rejected", errors.New("x")); err == nil || isPoison(err) ||
		!strings.Contains(err.Error(), "dead_letter is not configured") {
		t.Errorf("DeadLetter without dead_letter: %v", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	ok := func() *config.Config {
		return &config.Config{Sinks: map[string]config.Sink{"main": {Type: "kafka"}}, Routes: []config.Route{{Sink: "main"}}}
	}
	r, err := New(ok())
	if err != nil {
		t.Fatalf("route without topic (default {topic}): %v", err)
	}
	_, msg, err := r.Route(txn(), event())
	if err != nil || msg.Topic != "order.created" {
		t.Errorf("default topic template: %+v %v", msg, err)
	}
	for name, edit := range map[string]func(*config.Config){
		"unknown sink":      func(c *config.Config) { c.Routes[0].Sink = "nope" },
		"bad glob":          func(c *config.Config) { c.Routes[0].Match.Table = "[" },
		"bad template":      func(c *config.Config) { c.Routes[0].Topic = "{nope}" },
		"bad tag":           func(c *config.Config) { c.Routes[0].Tag = "{" },
		"dead letter sink":  func(c *config.Config) { c.DeadLetter = &config.DeadLetter{Sink: "x", Topic: "t"} },
		"dead letter topic": func(c *config.Config) { c.DeadLetter = &config.DeadLetter{Sink: "main"} },
	} {
		c := ok()
		edit(c)
		if r, err := New(c); err == nil || r != nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, _, err := r.Route(nil, event()); err == nil || isPoison(err) {
		t.Errorf("nil txn: %v", err)
	}
	if _, _, err := r.Route(txn(), nil); err == nil {
		t.Error("nil event accepted")
	}
}

// TestConcurrentRoute exercises Route from many goroutines; run with -race.
func TestConcurrentRoute(t *testing.T) {
	r := newRouter(t, `routes: [{sink: main, topic: "{table}.{topic}"}]`+"\n")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ev := event()
				ev.Topic = field(fmt.Sprintf("t%d-%d", g, i))
				ev.Headers = field(fmt.Sprintf(`{"i": %d}`, i))
				_, msg, err := r.Route(txn(), ev)
				if err != nil {
					t.Error(err)
					return
				}
				if want := fmt.Sprintf("outbox_event.t%d-%d", g, i); msg.Topic != want || !bytes.Equal(msg.Headers[4].Value, fmt.Appendf(nil, "%d", i)) {
					t.Errorf("got %s %q", msg.Topic, msg.Headers[4].Value)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// FuzzRoute feeds arbitrary bytes as the headers column: Route must not panic, must either
// succeed with the fixed headers first and no reserved name among the rest, or report poison.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{`{"a":"b","n":1}`, `{}`, ``, `null`, `[1]`, `{"event_id":"x","o":{"p":[true,null]}}`,
		`{"a":"\ud800"}`, "{\"\xff\":\"\xfe\"}", `{"a":1}{`, `{"a" 1}`, ` {"deep":[[[[[[[[[[[]]]]]]]]]]]} `} {
		f.Add([]byte(s))
	}
	cfg, err := config.Parse([]byte(baseConfig + "routes: [{sink: main}]\n"))
	if err != nil {
		f.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, headers []byte) {
		ev := event()
		ev.Headers = binlog.Field{Bytes: headers}
		_, msg, err := r.Route(txn(), ev)
		if err != nil {
			if !isPoison(err) {
				t.Fatalf("non-poison error %v", err)
			}
			return
		}
		if len(msg.Headers) < 4 || msg.Headers[0].Key != HeaderEventID || string(msg.Headers[3].Value) != "0-1-42" {
			t.Fatalf("fixed headers wrong: %q", headerMap(msg.Headers))
		}
		for _, h := range msg.Headers[4:] {
			if reserved(h.Key) {
				t.Fatalf("reserved header %q from the row", h.Key)
			}
		}
	})
}

// The table and GTID header values are shared by the events of one transaction and table, and
// never carried over to another transaction or table.
func TestBaseHeadersFollowTheTransactionAndTable(t *testing.T) {
	r := newRouter(t, "routes:\n  - sink: main\n    topic: \"t\"\n")
	other := event()
	other.Table = "outbox_two"
	t1, t2 := txn(), &binlog.Txn{GTID: "0-1-43", CommitTime: commit}
	var got []string
	for _, c := range []struct {
		txn *binlog.Txn
		ev  *binlog.Event
	}{{t1, event()}, {t1, event()}, {t1, other}, {t2, event()}, {t2, other}} {
		_, _, msg, err := r.RouteIndexed(c.txn, c.ev)
		if err != nil {
			t.Fatal(err)
		}
		hs := headerMap(msg.Headers)
		got = append(got, strings.Join(hs[len(hs)-2:], " "))
	}
	want := []string{
		"outbox_table=shop.outbox_event outbox_gtid=0-1-42", "outbox_table=shop.outbox_event outbox_gtid=0-1-42",
		"outbox_table=shop.outbox_two outbox_gtid=0-1-42",
		"outbox_table=shop.outbox_event outbox_gtid=0-1-43", "outbox_table=shop.outbox_two outbox_gtid=0-1-43",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("headers\n got %q\nwant %q", got, want)
	}
}
