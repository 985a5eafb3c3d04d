package pipeline

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/sink"
)

// indexedRouter is fakeRouter that also names route 1 for every row.
type indexedRouter struct{ fakeRouter }

func (r indexedRouter) RouteIndexed(t *binlog.Txn, ev *binlog.Event) (string, int, *sink.Message, error) {
	name, msg, err := r.Route(t, ev)
	if err != nil {
		return "", -1, nil, err
	}
	return name, 1, msg, nil
}

// The pipeline counts rows read per table, deliveries and failed attempts per sink and route,
// retries, dead letters by reason, sends, checkpoint saves and sink reachability.
func TestPipelineMetrics(t *testing.T) {
	m := metrics.New(metrics.Options{})
	s := &memSink{fail: func(msg *sink.Message, attempt int) error {
		switch {
		case msg.EventID == "1" && attempt == 1:
			return errors.New("broker busy")
		case msg.EventID == "3" && msg.Topic != "dlq":
			return sink.Permanent(errors.New("message too large"))
		}
		return nil
	}}
	saver := &memSaver{}
	p, err := New(Config{
		Router: indexedRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), OnPoison: PoisonDeadLetter,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		CheckpointInterval: time.Hour, Logger: zerolog.Nop(), Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.SetPipeline(p)
	if err := runAll(t, p, txn(1, "a:1", "b:2"), txn(2, "c:3", "d:4@nowhere")); err != nil {
		t.Fatal(err)
	}
	reg := m.Registry()
	expect := func(name string, want float64, labels ...string) {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
		metric:
			for _, mm := range f.Metric {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, l := range mm.Label {
						if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue metric
					}
				}
				var got float64
				switch {
				case mm.Counter != nil:
					got = mm.Counter.GetValue()
				case mm.Gauge != nil:
					got = mm.Gauge.GetValue()
				case mm.Histogram != nil:
					got = float64(mm.Histogram.GetSampleCount())
				}
				if got != want {
					t.Errorf("%s%v = %v, want %v", name, labels, got, want)
				}
				return
			}
		}
		t.Errorf("%s%v not found", name, labels)
	}
	expect("outboxd_events_read_total", 4, "table", "shop.outbox_event")
	// 1 (after a retry) and 2 on route 1; the dead letters of 3 (rejected) and 4 (no route).
	expect("outboxd_events_delivered_total", 2, "sink", "main", "route", "1")
	expect("outboxd_events_delivered_total", 2, "sink", "main", "route", "dead_letter")
	expect("outboxd_events_failed_total", 1, "sink", "main", "route", "1", "kind", "transient")
	expect("outboxd_events_failed_total", 1, "sink", "main", "route", "1", "kind", "permanent")
	expect("outboxd_send_retries_total", 1, "sink", "main")
	expect("outboxd_dead_letters_total", 1, "reason", "rejected")
	// fakeRouter's no-route error is not a *router.PoisonError: it counts as malformed.
	expect("outboxd_dead_letters_total", 1, "reason", "malformed")
	expect("outboxd_sink_up", 1, "sink", "main")
	// Per table and route: 1 and 2 delivered on route 1, the dead letters of 3 and 4 delivered;
	// 3 dead-lettered from route 1 (rejected), 4 before any route took it.
	expect("outboxd_table_events_delivered_total", 2, "table", "shop.outbox_event", "route", "1")
	expect("outboxd_table_events_delivered_total", 2, "table", "shop.outbox_event", "route", "dead_letter")
	expect("outboxd_table_dead_letters_total", 1, "table", "shop.outbox_event", "route", "1")
	expect("outboxd_table_dead_letters_total", 1, "table", "shop.outbox_event", "route", "none")
	// Both transactions had rows and were acknowledged; their commit times are not precise.
	expect("outboxd_read_to_ack_seconds", 2)
	expect("outboxd_commit_to_ack_seconds", 0)
	expect("outboxd_inflight_events_limit", DefaultMaxInflightEvents)
	expect("outboxd_inflight_bytes_limit", DefaultMaxInflightBytes)
	expect("outboxd_checkpoint_saves_total", 1)
	expect("outboxd_inflight_events", 0)
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "outboxd_send_duration_seconds" && f.Metric[0].Histogram.GetSampleCount() < 3 {
			// At least: the first send, the resend of 1, and the dead letter of 3.
			t.Errorf("send duration samples = %d", f.Metric[0].Histogram.GetSampleCount())
		}
	}
	if got := saver.last(); got != "0-1-2" {
		t.Errorf("checkpoint %q", got)
	}
	if p.AckedTransactions() != 2 || p.ReadSet().String() != "0-1-2" {
		t.Errorf("acked %d, read set %s", p.AckedTransactions(), p.ReadSet())
	}
	if _, _, ok := p.Oldest(); ok {
		t.Error("Oldest reports a pending transaction after everything was acknowledged")
	}
	// Each dead letter's code (outbox_dead_letter_code) is the reason label it was counted under.
	codes := map[string]string{}
	for _, msg := range s.stored {
		if msg.Topic == "dlq" {
			for _, h := range msg.Headers {
				if h.Key == "code" {
					codes[msg.EventID] = string(h.Value)
				}
			}
		}
	}
	if codes["3"] != metrics.ReasonRejected || codes["4"] != metrics.ReasonMalformed || len(codes) != 2 {
		t.Errorf("dead-letter codes by event_id %v, want 3=%s 4=%s", codes, metrics.ReasonRejected, metrics.ReasonMalformed)
	}
}

// Config.RouteLabels name routes in the delivery metrics; an index past them is its own label.
func TestRouteLabelsNameTheDeliveries(t *testing.T) {
	m := metrics.New(metrics.Options{})
	p, err := New(Config{
		Router: indexedRouter{}, Sinks: map[string]sink.Sink{"main": &memSink{}}, Saver: &memSaver{},
		Start: gtid.Empty(gtid.MariaDB), CheckpointInterval: time.Hour, Logger: zerolog.Nop(), Metrics: m,
		RouteLabels: []string{"zero", "orders"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := runAll(t, p, txn(1, "a:1", "b:2"), txn(2, "c:3")); err != nil {
		t.Fatal(err)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "outboxd_events_delivered_total" && f.GetName() != "outboxd_table_events_delivered_total" {
			continue
		}
		for _, mm := range f.Metric {
			k := f.GetName()
			for _, l := range mm.Label {
				k += " " + l.GetName() + "=" + l.GetValue()
			}
			got[k] = mm.Counter.GetValue()
		}
	}
	want := map[string]float64{
		"outboxd_events_delivered_total route=orders sink=main":                     3,
		"outboxd_table_events_delivered_total route=orders table=shop.outbox_event": 3,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if p.routeLabel(2, false) != "2" {
		t.Errorf("route 2 without a label is %q, want its index", p.routeLabel(2, false))
	}
}
