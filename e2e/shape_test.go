package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkasarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/daemon"
)

// shapeTable creates w.schema.name like the outbox table plus the shape columns: occurred_at
// of type tsType, part INT and the trace-context columns tp and ts.
func shapeTable(w *world, name, tsType string) string {
	w.exec(fmt.Sprintf("CREATE TABLE %s.%s LIKE %s.outbox_event", w.schema, name, w.schema))
	w.exec(fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN occurred_at %s NULL, ADD COLUMN part INT NULL, ADD COLUMN tp VARCHAR(64) NULL, ADD COLUMN ts VARCHAR(64) NULL",
		w.schema, name, tsType))
	return w.schema + "." + name
}

// shapeRow is one row of a shapeTable.
type shapeRow struct {
	EventID, Key, Topic string
	EventType           any
	Payload, Occurred   any
	Part, TP, TS        any
	Headers             any
}

// insertShape commits rows into table in one transaction, on a session with time zone tz (""
// for the server's), and returns the transaction's GTID.
func insertShape(t *testing.T, w *world, table, tz string, rows ...shapeRow) string {
	t.Helper()
	ctx := context.Background()
	conn, err := w.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tz != "" {
		if _, err := conn.ExecContext(ctx, "SET time_zone = ?", tz); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := tx.Exec("INSERT INTO "+table+" (event_id, biz_key, topic, event_type, payload, headers, occurred_at, part, tp, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			r.EventID, r.Key, r.Topic, r.EventType, r.Payload, r.Headers, r.Occurred, r.Part, r.TP, r.TS); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var g string
	if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&g); err != nil {
		t.Fatal(err)
	}
	return g
}

// createTopic creates a topic with 3 partitions and configs on kc.
func createTopic(t *testing.T, kc *kfake.Cluster, topic string, configs map[string]*string) *kadm.Client {
	t.Helper()
	adm := adminClient(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 3, 1, configs, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	return adm
}

// adminClient is a franz-go admin client of kc, closed when the test ends.
func adminClient(t *testing.T, kc *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func byEventID(rs []*kgo.Record) map[string]*kgo.Record {
	out := map[string]*kgo.Record{}
	for _, r := range rs {
		out[header(r, "event_id")] = r
	}
	return out
}

// Item 1 of issue 14: each column option end to end, MariaDB to a real Kafka client. The
// record time from a DATETIME read in timestamp_zone, from a TIMESTAMP (an instant, whatever
// the writing session's zone) and from epoch millis; an explicit partition and a NULL one (by
// key); extra_headers; a NULL and an empty payload as tombstones (null values) on a compacted
// topic, and an empty payload sent as it is under the default.
func TestShapeColumnOptions(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "shape.dt", "shape.ts", "shape.ms")
	compact := "compact"
	adm := createTopic(t, kc, "shape.compact", map[string]*string{"cleanup.policy": &compact})
	dt := shapeTable(w, "ev_dt", "DATETIME(3)")
	ts := shapeTable(w, "ev_ts", "TIMESTAMP(3)")
	ms := shapeTable(w, "ev_ms", "BIGINT")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{
		dt + "\n    columns: {timestamp: occurred_at, partition: part}\n    timestamp_zone: Asia/Kolkata\n    extra_headers: {tp: traceparent, ts: tracestate}\n    empty_payload: tombstone",
		ts + "\n    columns: {timestamp: occurred_at}",
		ms + "\n    columns: {timestamp: occurred_at}",
	}
	startRelay(t, o, daemon.Options{})

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	insertShape(t, w, dt, "",
		shapeRow{EventID: "dt-p2", Key: "k1", Topic: "shape.dt", Payload: []byte(`{"n":1}`), Occurred: "2026-03-01 14:30:00.123", Part: 2, TP: traceparent, TS: "congo=t61rcWkgMzE"},
		shapeRow{EventID: "dt-bykey", Key: "k1", Topic: "shape.dt", Payload: []byte(`{"n":2}`), Occurred: "2026-03-01 14:30:01"},
		shapeRow{EventID: "tomb-null", Key: "gone-1", Topic: "shape.compact", Occurred: nil},
		shapeRow{EventID: "tomb-empty", Key: "gone-2", Topic: "shape.compact", Payload: []byte{}},
	)
	insertShape(t, w, ts, "+02:00", shapeRow{EventID: "ts", Key: "k", Topic: "shape.ts", Payload: []byte("x"), Occurred: "2026-03-01 11:00:00.250"})
	insertShape(t, w, ms, "", shapeRow{EventID: "ms", Key: "k", Topic: "shape.ms", Payload: []byte{}, Occurred: int64(1772355600500)})

	c := newConsumer(t, kc, "shape.dt", "shape.ts", "shape.ms", "shape.compact")
	got := byEventID(c.waitFor(6, 30*time.Second))
	at := func(id string) *kgo.Record {
		t.Helper()
		r, ok := got[id]
		if !ok {
			t.Fatalf("event %s not received", id)
		}
		return r
	}

	p2 := at("dt-p2")
	if want := time.Date(2026, 3, 1, 9, 0, 0, 123e6, time.UTC); !p2.Timestamp.Equal(want) {
		t.Errorf("dt-p2: record time %s, want %s (14:30:00.123 in Asia/Kolkata)", p2.Timestamp.UTC(), want)
	}
	if p2.Partition != 2 {
		t.Errorf("dt-p2: partition %d, want 2 from the part column", p2.Partition)
	}
	if header(p2, "traceparent") != traceparent || header(p2, "tracestate") != "congo=t61rcWkgMzE" {
		t.Errorf("dt-p2: extra headers %v", p2.Headers)
	}
	byKey := at("dt-bykey")
	want := kgo.StickyKeyPartitioner(nil).ForTopic("shape.dt").Partition(&kgo.Record{Key: []byte("k1")}, 3)
	if byKey.Partition != int32(want) {
		t.Errorf("dt-bykey: a NULL part is placed by key: partition %d, want %d", byKey.Partition, want)
	}
	if header(byKey, "traceparent") != "" {
		t.Errorf("dt-bykey: a NULL extra column added a header: %v", byKey.Headers)
	}
	if r := at("ts"); !r.Timestamp.Equal(time.Date(2026, 3, 1, 9, 0, 0, 250e6, time.UTC)) {
		t.Errorf("ts: record time %s, want 09:00:00.250Z (11:00:00.250 written at +02:00)", r.Timestamp.UTC())
	}
	r := at("ms")
	if !r.Timestamp.Equal(time.UnixMilli(1772355600500)) {
		t.Errorf("ms: record time %s, want epoch millis 1772355600500", r.Timestamp.UTC())
	}
	if r.Value == nil || len(r.Value) != 0 {
		t.Errorf("ms: an empty payload under empty_payload: send is an empty value, got %q (nil %v)", r.Value, r.Value == nil)
	}

	// The compacted topic's consumer sees both tombstones as null values with the row's key.
	desc, err := adm.DescribeTopicConfigs(context.Background(), "shape.compact")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := desc.On("shape.compact", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cv := range policy.Configs {
		found = found || cv.Key == "cleanup.policy" && cv.MaybeValue() == "compact"
	}
	if !found {
		t.Fatalf("shape.compact is not a compacted topic: %+v", policy.Configs)
	}
	for id, key := range map[string]string{"tomb-null": "gone-1", "tomb-empty": "gone-2"} {
		r := at(id)
		if r.Value != nil || string(r.Key) != key || r.Topic != "shape.compact" {
			t.Errorf("%s: value %q (nil %v), key %q on %s; want a null value with key %s", id, r.Value, r.Value == nil, r.Key, r.Topic, key)
		}
	}
}

// An out-of-range partition (the topic has 3) follows on_poison: stop halts outboxd naming the
// row with the checkpoint before it; dead_letter diverts it and later rows go on.
func TestShapePartitionOutOfRange(t *testing.T) {
	for _, policy := range []string{"stop", "dead_letter"} {
		t.Run(policy, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			kc := kafkaCluster(t, "shape.dt", "outbox.dead_letter")
			dt := shapeTable(w, "ev_dt", "DATETIME(3)")
			o := simpleCfg(t, w, kc, w.position())
			o.Tables = []string{dt + "\n    columns: {partition: part}"}
			o.OnPoison = policy
			o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
			rl := startRelay(t, o, daemon.Options{})
			first := insertShape(t, w, dt, "", shapeRow{EventID: "ok", Key: "k", Topic: "shape.dt", Payload: []byte("1"), Part: 1})
			waitCheckpoint(t, o.Dir, first, 30*time.Second)
			insertShape(t, w, dt, "", shapeRow{EventID: "p7", Key: "k", Topic: "shape.dt", Payload: []byte("2"), Part: 7})
			last := insertShape(t, w, dt, "", shapeRow{EventID: "after", Key: "k", Topic: "shape.dt", Payload: []byte("3"), Part: 0})
			c := newConsumer(t, kc, "shape.dt")
			if policy == "stop" {
				err := rl.waitExit(t, 30*time.Second)
				if err == nil || !strings.Contains(err.Error(), "partition 7") || !strings.Contains(err.Error(), "p7") {
					t.Fatalf("outboxd stopped with %v, want the row and its partition named", err)
				}
				if got := readCheckpoint(t, o.Dir); got != first {
					t.Fatalf("checkpoint %s after the stop, want %s (before the poison row)", got, first)
				}
				if ids := eventIDs(c.settle(time.Second)); strings.Join(ids, ",") != "ok" {
					t.Fatalf("delivered %v, want only ok", ids)
				}
				return
			}
			dl := newConsumer(t, kc, "outbox.dead_letter")
			d := dl.waitForEvent("p7", 30*time.Second)[0]
			if code := header(d, "outbox_dead_letter_code"); code == "" || !strings.Contains(header(d, "outbox_dead_letter_reason"), "partition 7") {
				t.Errorf("dead letter code %q reason %q", code, header(d, "outbox_dead_letter_reason"))
			}
			c.waitForEvent("after", 30*time.Second)
			waitCheckpoint(t, o.Dir, last, 20*time.Second)
		})
	}
}

// Item 2 of issue 14: the CloudEvents Go SDK's Kafka binding (kafka_sarama, pure Go) decodes
// a format: cloudevents message into an event with the row's id, type, the route's source, the
// record time and the payload as data.
func TestCloudEventsSDKDecodes(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders", "orders.untyped")
	dt := shapeTable(w, "ev_dt", "DATETIME(6)")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{dt + "\n    columns: {timestamp: occurred_at}"}
	o.Routes = "  - match: {topic: orders}\n    sink: main\n    format: cloudevents\n    cloudevents: {source: /shop/orders}\n" +
		"  - sink: main\n    format: cloudevents\n    cloudevents: {type: shop.Untyped}\n"
	startRelay(t, o, daemon.Options{})
	payload := `{"order":42,"total":"9.99"}`
	insertShape(t, w, dt, "",
		shapeRow{EventID: "ce-1", Key: "order-42", Topic: "orders", EventType: "shop.OrderPaid", Payload: []byte(payload), Occurred: "2026-03-01 09:00:00.123456",
			Headers: `{"ce_subject":"order-42","ce_id":"spoofed"}`},
		shapeRow{EventID: "ce-2", Key: "order-43", Topic: "orders.untyped", Payload: []byte(`{}`), Occurred: "2026-03-01 09:00:01"},
	)
	c := newConsumer(t, kc, "orders", "orders.untyped")
	got := byEventID(c.waitFor(2, 30*time.Second))

	decode := func(r *kgo.Record) *struct {
		id, typ, source, subject, contentType, spec string
		tm                                          time.Time
		data                                        string
	} {
		t.Helper()
		cm := &sarama.ConsumerMessage{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		msg := kafkasarama.NewMessageFromConsumerMessage(cm)
		if enc := msg.ReadEncoding(); enc != binding.EncodingBinary {
			t.Fatalf("the SDK reads encoding %v, want binary", enc)
		}
		ev, err := binding.ToEvent(context.Background(), msg)
		if err != nil {
			t.Fatalf("the SDK cannot decode the message: %v (headers %v)", err, r.Headers)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("the SDK finds the event invalid: %v", err)
		}
		subject := ""
		if ev.Subject() != "" {
			subject = ev.Subject()
		}
		return &struct {
			id, typ, source, subject, contentType, spec string
			tm                                          time.Time
			data                                        string
		}{ev.ID(), ev.Type(), ev.Source(), subject, ev.DataContentType(), ev.SpecVersion(), ev.Time(), string(ev.Data())}
	}
	e1 := decode(got["ce-1"])
	if e1.id != "ce-1" || e1.typ != "shop.OrderPaid" || e1.source != "/shop/orders" || e1.spec != "1.0" ||
		e1.contentType != "application/json" || e1.data != payload || e1.subject != "order-42" {
		t.Errorf("ce-1 decoded as %+v", e1)
	}
	if want := time.Date(2026, 3, 1, 9, 0, 0, 123456e3, time.UTC); !e1.tm.Equal(want) {
		t.Errorf("ce-1 time %s, want %s", e1.tm, want)
	}
	e2 := decode(got["ce-2"])
	if e2.id != "ce-2" || e2.typ != "shop.Untyped" || e2.source != "/outboxd/"+w.schema+".ev_dt" {
		t.Errorf("ce-2 decoded as %+v", e2)
	}
}

// on_update: an UPDATE of an outbox row is never sent; warn logs and counts it
// (outboxd_outbox_updates_total), stop halts outboxd naming the row and its GTID, with the
// checkpoint before its transaction.
func TestOnUpdate(t *testing.T) {
	for _, policy := range []string{"warn", "stop"} {
		t.Run(policy, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			kc := kafkaCluster(t, "t")
			o := simpleCfg(t, w, kc, w.position())
			table := w.schema + ".outbox_event"
			o.Tables = []string{table + "\n    on_update: " + policy}
			admin := freeAddr(t)
			o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
			rl := startRelay(t, o, daemon.Options{})
			first := w.commit(row{EventID: "a", Key: "k", Topic: "t", Payload: []byte("1")})
			waitCheckpoint(t, o.Dir, first, 30*time.Second)
			w.exec("UPDATE " + table + " SET payload = 'changed' WHERE event_id = 'a'")
			upd := w.position()
			w.commit(row{EventID: "b", Key: "k", Topic: "t", Payload: []byte("2")})
			c := newConsumer(t, kc, "t")
			if policy == "stop" {
				err := rl.waitExit(t, 30*time.Second)
				if err == nil || !strings.Contains(err.Error(), `event_id "a"`) || !strings.Contains(err.Error(), "was UPDATEd") ||
					!strings.Contains(err.Error(), table) {
					t.Fatalf("outboxd stopped with %v, want the updated row named", err)
				}
				if !strings.Contains(err.Error(), upd) {
					t.Errorf("the error does not name the update's GTID %s: %v", upd, err)
				}
				if got := readCheckpoint(t, o.Dir); got != first {
					t.Fatalf("checkpoint %s, want %s (before the update)", got, first)
				}
				if ids := eventIDs(c.settle(time.Second)); strings.Join(ids, ",") != "a" {
					t.Fatalf("delivered %v, want only a", ids)
				}
				return
			}
			c.waitForEvent("b", 30*time.Second)
			if rs := c.settle(500 * time.Millisecond); len(rs) != 2 {
				t.Fatalf("delivered %v, want a and b (the update is not sent)", eventIDs(rs))
			}
			vals, _ := admScrape(t, admin)
			if vals["outboxd_outbox_updates_total"] != 1 {
				t.Errorf("outboxd_outbox_updates_total = %v, want 1", vals["outboxd_outbox_updates_total"])
			}
			if !strings.Contains(rl.logText(), "an outbox row was UPDATEd") {
				t.Errorf("no warning logged:\n%s", rl.logText())
			}
		})
	}
}

// check and run refuse, with the same lines, a timestamp or partition column of a type outboxd
// cannot read, a missing extra_headers column, and a Kafka-only option on a route to RocketMQ.
func TestShapeCheckAndRunRefuse(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	tbl := shapeTable(w, "ev_bad", "VARCHAR(32)")
	w.exec("ALTER TABLE " + tbl + " MODIFY part DECIMAL(10,2)")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = []string{tbl + "\n    columns: {timestamp: occurred_at, partition: part}\n    extra_headers: {nosuch: traceparent}"}
	path := writeCfg(t, o)
	wants := []string{
		"varchar(32) (configured as tables[0].columns.timestamp): set tables[0].columns.timestamp to a column of type DATETIME, TIMESTAMP or an integer of epoch milliseconds (BIGINT)",
		"decimal(10,2) (configured as tables[0].columns.partition): set tables[0].columns.partition to a column of type an integer (INT)",
		"column " + tbl + ".nosuch is missing (configured as tables[0].extra_headers.nosuch",
	}
	for _, cmd := range []string{"check", "run"} {
		code, out := runBinary(t, cmd, "--config", path)
		for _, want := range wants {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("%s: exit %d, want 1 and %q:\n%s", cmd, code, want, out)
			}
		}
	}

	o.Sinks["mq"] = "{type: rocketmq, nameservers: [\"127.0.0.1:1\"]}"
	o.Tables = []string{w.schema + ".outbox_event\n    empty_payload: tombstone"}
	o.Routes = "  - sink: mq\n    format: cloudevents\n"
	path = writeCfg(t, o)
	for _, cmd := range []string{"check", "run"} {
		code, out := runBinary(t, cmd, "--config", path)
		for _, want := range []string{
			`tables[0].empty_payload (line`, `is Kafka only, but routes[0] sends rows of ` + w.schema + `.outbox_event to rocketmq sink "mq"`,
			`routes[0].format (line`, `cloudevents is Kafka only`,
		} {
			if code != 2 || !strings.Contains(out, want) {
				t.Errorf("%s: exit %d, want 2 and %q:\n%s", cmd, code, want, out)
			}
		}
	}
}

// outboxd backfill applies the shape options to the rows it reads over SQL as run does: the
// record time from a DATETIME in timestamp_zone, the partition column, extra_headers and a
// tombstone.
func TestShapeBackfill(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "shape.b")
	dt := shapeTable(w, "ev_dt", "DATETIME(3)")
	o := simpleCfg(t, w, kc, "")
	o.Tables = []string{dt + "\n    columns: {timestamp: occurred_at, partition: part}\n    timestamp_zone: Asia/Kolkata\n    extra_headers: {tp: traceparent}\n    empty_payload: tombstone"}
	insertShape(t, w, dt, "",
		shapeRow{EventID: "b1", Key: "k1", Topic: "shape.b", Payload: []byte("1"), Occurred: "2026-03-01 14:30:00.5", Part: 1, TP: tpCol},
		shapeRow{EventID: "b2", Key: "k2", Topic: "shape.b", Part: 2},
	)
	code, out := runBinary(t, "backfill", "--config", writeCfg(t, o), "--table", dt)
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	got := byEventID(newConsumer(t, kc, "shape.b").waitFor(2, 30*time.Second))
	b1, b2 := got["b1"], got["b2"]
	if b1 == nil || b2 == nil {
		t.Fatalf("got %v", got)
	}
	if !b1.Timestamp.Equal(time.Date(2026, 3, 1, 9, 0, 0, 500e6, time.UTC)) || b1.Partition != 1 || header(b1, "traceparent") != tpCol {
		t.Errorf("b1: time %s partition %d headers %v", b1.Timestamp.UTC(), b1.Partition, b1.Headers)
	}
	if b2.Value != nil || b2.Partition != 2 {
		t.Errorf("b2: value %q (nil %v) partition %d, want a tombstone in partition 2", b2.Value, b2.Value == nil, b2.Partition)
	}
}
