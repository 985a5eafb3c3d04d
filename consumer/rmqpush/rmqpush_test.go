package rmqpush_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
	"github.com/outboxd/outboxd/consumer/rmqpush"
)

func delivered(msgID string, props map[string]string, body string) *primitive.MessageExt {
	m := &primitive.MessageExt{MsgId: msgID}
	m.Topic, m.Body = "ORDER_PAID", []byte(body)
	for k, v := range props {
		m.WithProperty(k, v)
	}
	return m
}

// outboxd's property encoding is undone: the event id from the event_id property or KEYS, the
// key from SHARDING_KEY, headers without RocketMQ's own properties.
func TestMessageDecodesOutboxdProperties(t *testing.T) {
	m, err := rmqpush.Message(delivered("M1", map[string]string{
		"KEYS": "base64:/2V2", "event_id": "base64:/2V2", "SHARDING_KEY": "alice", "TAGS": "OrderPaid",
		"event_type": "OrderPaid", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	if m.EventID != "\xffev" || string(m.Key) != "alice" || m.MsgID != "M1" || len(m.Headers) != 3 {
		t.Fatalf("%+v", m)
	}
	if v, _ := m.Header("traceparent"); string(v) != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("traceparent %q", v)
	}
	// Without the event_id property, KEYS (decoded) is the event id.
	if m, err := rmqpush.Message(delivered("M2", map[string]string{"KEYS": "base64:ZXYtMQ=="}, "{}")); err != nil || m.EventID != "ev-1" {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := rmqpush.Message(delivered("M3", map[string]string{"KEYS": "ev-2", "h": "base64:%%"}, "{}")); err == nil {
		t.Fatal("bad base64: no error")
	}
}

// The listener against MariaDB: success only when every message of a delivery was handled, a
// retry otherwise (SuspendCurrentQueueAMoment when orderly); the redelivery's handled messages
// are duplicates; an undecodable message is rejected, not retried.
func TestListener(t *testing.T) {
	d := kittest.New(t)
	ctx := t.Context()
	down := true
	orders := map[string]int{"ev-1": 1, "ev-2": 2, "ev-3": 3}
	fn := func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
		if m.EventID == "ev-2" && down {
			return errors.New("benefit service down")
		}
		return kittest.Grant(orders[m.EventID])(ctx, tx, m)
	}
	var outcomes []string
	l := rmqpush.Listener(d.Kit, fn, rmqpush.Options{Handled: func(m consumer.Message, o consumer.Outcome) { outcomes = append(outcomes, m.EventID+":"+o.String()) }})
	batch := []*primitive.MessageExt{
		delivered("M1", map[string]string{"event_id": "ev-1"}, "{}"),
		delivered("M2", map[string]string{"event_id": "ev-2"}, "{}"),
		delivered("M3", map[string]string{"event_id": "ev-3"}, "{}"),
	}
	if res, err := l(ctx, batch...); res != rmqconsumer.ConsumeRetryLater || err == nil {
		t.Fatalf("with ev-2 failing: %v %v, want ConsumeRetryLater", res, err)
	}
	down = false
	if res, err := l(ctx, batch...); res != rmqconsumer.ConsumeSuccess || err != nil {
		t.Fatalf("redelivery: %v %v", res, err)
	}
	if got, want := strings.Join(outcomes, " "), "ev-1:processed ev-1:duplicate ev-2:processed ev-3:processed"; got != want {
		t.Fatalf("outcomes %s, want %s", got, want)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM benefit"); n != 3 {
		t.Fatalf("%d benefits", n)
	}
	bad := delivered("M4", map[string]string{"KEYS": "ev-4", "event_id": "ev-4", "h": "base64:%%"}, "{}")
	if res, err := l(ctx, bad); res != rmqconsumer.ConsumeSuccess || err != nil {
		t.Fatalf("undecodable: %v %v, want ConsumeSuccess (rejected)", res, err)
	}
	if d.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'ev-4' AND status = 'REJECTED'") != 1 ||
		d.Count(t, "SELECT COUNT(*) FROM quarantined_event WHERE event_id = 'ev-4' AND error LIKE '%bad base64%'") != 1 {
		t.Fatal("undecodable message not rejected and quarantined")
	}
	failing := func(context.Context, *sql.Tx, consumer.Message) error { return errors.New("down") }
	orderly := rmqpush.Listener(d.Kit, failing, rmqpush.Options{Orderly: true})
	if res, err := orderly(ctx, delivered("M5", map[string]string{"event_id": "ev-5"}, "{}")); res != rmqconsumer.SuspendCurrentQueueAMoment || err == nil {
		t.Fatalf("orderly failure: %v %v, want SuspendCurrentQueueAMoment", res, err)
	}
}

// A message with a header that does not decode still gets its real event id (decoded), so that
// its REJECTED mark is under the event's id, not under the encoded text.
func TestMessageWithABadHeaderKeepsItsEventID(t *testing.T) {
	for _, props := range []map[string]string{
		{"event_id": "base64:ZXYtNA==", "KEYS": "base64:ZXYtNA==", "h": "base64:%%"},
		{"KEYS": "base64:ZXYtNA==", "h": "base64:%%"},
	} {
		m, err := rmqpush.Message(delivered("M", props, "{}"))
		if err == nil || m.EventID != "ev-4" {
			t.Errorf("%v: event id %q, error %v; want ev-4 and the header's error", props, m.EventID, err)
		}
	}
}
