package kafkago_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
	"github.com/outboxd/outboxd/consumer/kafkago"
)

// A real kafka-go Reader in a consumer group against kfake: a message whose work fails is
// handled again before anything after it, and the group's committed offset never passes it; a
// duplicate is committed without the work; a permanent error is committed as REJECTED.
func TestRunCommitsOnlyAfterHandle(t *testing.T) {
	d := kittest.New(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "order.paid"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("order.paid"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	for _, id := range []string{"ev-1", "ev-2", "ev-1", "ev-bad", "ev-3"} { // offsets 0..4; ev-1 twice
		r := &kgo.Record{Value: []byte(id), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	committed := func() int64 {
		offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "benefits")
		if err != nil {
			t.Fatal(err)
		}
		o, ok := offs.Lookup("order.paid", 0)
		if !ok {
			return -1
		}
		return o.At
	}

	var mu sync.Mutex
	var order []string
	failures := 0
	blocked := make(chan struct{})
	unblock := make(chan struct{})
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		mu.Lock()
		order = append(order, msg.EventID)
		mu.Unlock()
		switch msg.EventID {
		case "ev-2":
			if failures++; failures == 3 {
				close(blocked) // the third failure: the test looks at the committed offset now
				<-unblock
			}
			if failures <= 3 {
				return errors.New("benefit service down")
			}
		case "ev-bad":
			return consumer.Permanent(errors.New("no such order"))
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO benefit (order_id, event_id) VALUES (?, ?)", len(msg.EventID)*100+int(msg.EventID[3]), msg.EventID)
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: kc.ListenAddrs(), GroupID: "benefits", Topic: "order.paid",
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var outcomes []string
	go func() {
		done <- kafkago.Run(runCtx, r, d.Kit, fn, kafkago.Options{Backoff: 10 * time.Millisecond,
			Handled: func(m consumer.Message, o consumer.Outcome) { outcomes = append(outcomes, m.EventID+":"+o.String()) }})
	}()

	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("ev-2 was not retried three times within 30s")
	}
	if got := committed(); got != 1 { // ev-1 done; ev-2 (offset 1) failing: nothing past it
		t.Fatalf("committed offset %d while offset 1 is failing, want 1", got)
	}
	close(unblock)
	deadline := time.Now().Add(30 * time.Second)
	for committed() != 5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := committed(); got != 5 {
		t.Fatalf("committed offset %d, want 5", got)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, " "); got != "ev-1 ev-2 ev-2 ev-2 ev-2 ev-bad ev-3" {
		t.Fatalf("work order %s", got)
	}
	if got := strings.Join(outcomes, " "); got != "ev-1:processed ev-2:processed ev-1:duplicate ev-bad:rejected ev-3:processed" {
		t.Fatalf("outcomes %s", got)
	}
	if d.Count(t, "SELECT COUNT(*) FROM benefit") != 3 || d.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE status = 'REJECTED' AND msg_id = 'order.paid/0@3'") != 1 {
		t.Fatal("want 3 benefits and ev-bad REJECTED")
	}
}

// The event id is outboxd's event_id header, the first one when a producer other than outboxd
// repeated it (outboxd sets it first and drops a row header of that name); none means "" (the
// kit quarantines such a message). The other headers are kept in order. Pure.
func TestMessageEventIDHeader(t *testing.T) {
	m := kafkago.Message(kafka.Message{Topic: "order.paid", Partition: 2, Offset: 7, Key: []byte("k"), Value: []byte("v"),
		Headers: []kafka.Header{{Key: "event_id", Value: []byte("ev-a")}, {Key: "event_type", Value: []byte("OrderPaid")}, {Key: "event_id", Value: []byte("ev-b")}}})
	if m.EventID != "ev-a" || m.MsgID != "order.paid/2@7" || len(m.Headers) != 3 || string(m.Key) != "k" || string(m.Payload) != "v" {
		t.Fatalf("%+v", m)
	}
	if m := kafkago.Message(kafka.Message{Headers: []kafka.Header{{Key: "Event_ID", Value: []byte("x")}}}); m.EventID != "" {
		t.Fatalf("event id %q from a header of another name", m.EventID)
	}
}
