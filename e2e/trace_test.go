package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// W3C Trace Context: version 00, a 32-hex trace id, a 16-hex parent id, 2-hex flags.
var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

const (
	tpJSON  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tpCol   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	tsJSON  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	tsCol   = "vendor=abc"
	traceHd = `{"traceparent":"` + tpJSON + `","tracestate":"` + tsJSON + `"}`
)

// The README's two ways an application fills the trace context, on both sinks: entries of the
// headers JSON column, and columns placed by extra_headers. Kafka carries them as record
// headers, RocketMQ as user properties, byte for byte.
func TestTraceContextBothSinks(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "trace.k")
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"TRACE_R"}})
	tbl := shapeTable(w, "ev_trace", "DATETIME(3)")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{tbl + "\n    extra_headers: {tp: traceparent, ts: tracestate}"}
	o.Sinks["rmq"] = rmqSink(rc)
	o.Routes = "  - match: {topic: \"trace.r\"}\n    sink: rmq\n    topic: TRACE_R\n  - sink: main\n"
	startRelay(t, o, daemon.Options{})
	insertShape(t, w, tbl, "",
		shapeRow{EventID: "k-json", Key: "a", Topic: "trace.k", Payload: []byte("1"), Headers: traceHd},
		shapeRow{EventID: "k-col", Key: "a", Topic: "trace.k", Payload: []byte("2"), TP: tpCol, TS: tsCol},
		shapeRow{EventID: "r-json", Key: "a", Topic: "trace.r", Payload: []byte("3"), Headers: traceHd},
		shapeRow{EventID: "r-col", Key: "a", Topic: "trace.r", Payload: []byte("4"), TP: tpCol, TS: tsCol},
	)
	want := map[string][2]string{"k-json": {tpJSON, tsJSON}, "k-col": {tpCol, tsCol}, "r-json": {tpJSON, tsJSON}, "r-col": {tpCol, tsCol}}
	check := func(id, tp, ts string) {
		t.Helper()
		if !traceparentRE.MatchString(tp) || tp != want[id][0] || ts != want[id][1] {
			t.Errorf("%s: traceparent %q tracestate %q, want %q %q", id, tp, ts, want[id][0], want[id][1])
		}
	}
	c := newConsumer(t, kc, "trace.k")
	for _, r := range c.waitFor(2, 30*time.Second) {
		check(header(r, "event_id"), header(r, "traceparent"), header(r, "tracestate"))
	}
	for _, m := range waitRMQ(t, rc, "TRACE_R", 2, 30*time.Second) {
		check(m.Keys, m.Properties["traceparent"], m.Properties["tracestate"])
	}
}
