package router

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// Record times at the edges of what Kafka and ce_time carry. The table reads DATETIMEs in
// Europe/Berlin (UTC+1 in winter).
func TestShapeRecordTimeRange(t *testing.T) {
	r := newShapeRouter(t)
	cases := []struct {
		name, value string
		want        time.Time // zero: poison
		poison      string
	}{
		{"DATETIME(6) keeps its fraction", "2026-03-01 10:00:00.123456", time.Date(2026, 3, 1, 9, 0, 0, 123456000, time.UTC), ""},
		{"first millisecond after the epoch", "1", time.UnixMilli(1), ""},
		{"a DATETIME in 1970 in Berlin that is 1969 in UTC", "1970-01-01 00:30:00", time.Time{}, "1970"},
		// kafka-go sends a record time of 0 as "unset" and stamps its own clock instead.
		{"epoch millis 0", "0", time.Time{}, "1970"},
		{"epoch DATETIME in UTC+1, exactly 0 in UTC", "1970-01-01 01:00:00", time.Time{}, "1970"},
		// RFC 3339 (ce_time) and DATETIME stop at year 9999.
		{"millis past 9999", "253402300800000", time.Time{}, "9999"},
		{"last millisecond of 9999", "253402300799999", time.UnixMilli(253402300799999), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := shapedEvent()
			ev.Timestamp = field(c.value)
			_, m, err := r.Route(txn(), ev)
			if c.poison != "" {
				var pe *PoisonError
				if !errors.As(err, &pe) || !strings.Contains(pe.Reason, c.poison) {
					t.Fatalf("%q: err %v (time %v), want poison naming %q", c.value, err, msgTime(m), c.poison)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !m.Time.Equal(c.want) {
				t.Errorf("%q: time %v, want %v", c.value, m.Time, c.want)
			}
		})
	}
}

func msgTime(m *sink.Message) any {
	if m == nil {
		return nil
	}
	return m.Time
}

// A row's own headers that a CloudEvents SDK reads as the route's attributes (it lowercases
// header names) are dropped whatever their case, so the event has one id and one content type.
func TestCloudEventsRowHeadersAnyCase(t *testing.T) {
	r := newShapeRouter(t)
	ev := shapedEvent()
	ev.Topic = field("ce.order")
	ev.Headers = field(`{"CE_ID":"spoof","Content-Type":"text/plain","Ce_Time":"1999-01-01T00:00:00Z","ce_subject":"order-9"}`)
	_, m, err := r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, h := range m.Headers {
		seen[strings.ToLower(h.Key)]++
	}
	for _, k := range []string{"ce_id", "content-type", "ce_time", "ce_subject"} {
		if seen[k] != 1 {
			t.Errorf("%d headers named %s in any case, want 1: %v", seen[k], k, headerMap(m.Headers))
		}
	}
}

// README: a column placed by extra_headers wins over a headers-JSON entry of the same name.
// RocketMQ properties are a map that keeps the first of two equal names, so the router must
// not hand it both; a NULL column adds nothing and leaves the entry.
func TestExtraHeaderColumnWinsOverJSONEntry(t *testing.T) {
	r := newShapeRouter(t)
	ev := shapedEvent()
	ev.Headers = field(`{"traceparent":"from-json","tracestate":"json-state","x":"y"}`)
	ev.Extra[0] = null // tracestate column
	_, m, err := r.Route(txn(), ev)
	if err != nil {
		t.Fatal(err)
	}
	got := headerLists(m.Headers)
	if tp := got["traceparent"]; len(tp) != 1 || tp[0] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("traceparent headers %q, want only the column's", tp)
	}
	if ts := got["tracestate"]; len(ts) != 1 || ts[0] != "json-state" {
		t.Errorf("tracestate headers %q, want the JSON entry (the column is NULL)", ts)
	}
	if x := got["x"]; len(x) != 1 {
		t.Errorf("x headers %q", x)
	}
}

// headerLists maps each header name to its values in order.
func headerLists(hs []sink.Header) map[string][]string {
	got := map[string][]string{}
	for _, h := range hs {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	return got
}

// CloudEvents requires a non-empty id (spec: "MUST be a non-empty string"); an SDK consumer
// refuses the event, so an empty event_id on a cloudevents route is poison, named.
func TestCloudEventsEmptyIDIsPoison(t *testing.T) {
	r := newShapeRouter(t)
	ev := shapedEvent()
	ev.Topic = field("ce.order")
	ev.EventID = field("")
	var pe *PoisonError
	if _, _, err := r.Route(txn(), ev); !errors.As(err, &pe) || !strings.Contains(pe.Reason, "ce_id") {
		t.Fatalf("err %v, want poison naming ce_id", err)
	}
}
