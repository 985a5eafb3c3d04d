package rmqpush_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
	"github.com/outboxd/outboxd/consumer/rmqpush"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// The real push consumer against the test broker, through the listener: a transient failure is
// sent back to %RETRY%group and delivered again, a duplicate is acked without the work, a
// permanent error is rejected; at the end each event has its one benefit.
func TestPushConsumerAgainstTestBroker(t *testing.T) {
	d := kittest.New(t)
	mq, err := rocketmq.Start(rocketmq.Options{Topics: []string{"ORDER_PAID"}, Queues: 2, RetryDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	ns := primitive.NewPassthroughResolver([]string{mq.NameServer()})

	p, err := producer.NewDefaultProducer(producer.WithNsResolver(ns), producer.WithRetry(0),
		producer.WithInstanceName(fmt.Sprintf("push-test-p-%d", os.Getpid())), producer.WithGroupName("push-test-producer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx := t.Context()
	for _, id := range []string{"ev-1", "ev-2", "ev-1", "ev-bad", "ev-3"} {
		m := primitive.NewMessage("ORDER_PAID", []byte(id))
		m.WithKeys([]string{id})
		m.WithProperty("event_id", id)
		if res, err := p.SendSync(ctx, m); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", id, res, err)
		}
	}

	var mu sync.Mutex
	attempts := map[string]int{}
	var outcomes []string
	fn := func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
		mu.Lock()
		attempts[m.EventID]++
		n := attempts[m.EventID]
		mu.Unlock()
		switch {
		case m.EventID == "ev-2" && n == 1:
			return errors.New("benefit service down")
		case m.EventID == "ev-bad":
			return consumer.Permanent(errors.New("no such order"))
		}
		return kittest.Grant(int(m.EventID[3]))(ctx, tx, m)
	}
	c, err := rmqconsumer.NewPushConsumer(rmqconsumer.WithNsResolver(ns), rmqconsumer.WithGroupName("benefits"),
		rmqconsumer.WithInstance(fmt.Sprintf("push-test-c-%d", os.Getpid())),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe("ORDER_PAID", rmqconsumer.MessageSelector{}, rmqpush.Listener(d.Kit, fn, rmqpush.Options{
		Handled: func(m consumer.Message, o consumer.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, m.EventID+":"+o.String())
			mu.Unlock()
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()

	deadline := time.Now().Add(30 * time.Second)
	for d.Count(t, "SELECT COUNT(*) FROM consumed_event") < 4 || d.Count(t, "SELECT COUNT(*) FROM benefit") < 3 {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("within 30s: outcomes %v, attempts %v", outcomes, attempts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong extra delivery
	mu.Lock()
	defer mu.Unlock()
	if attempts["ev-2"] != 2 || attempts["ev-1"] != 1 || attempts["ev-bad"] != 1 {
		t.Fatalf("attempts %v: want ev-2 twice (sent back, redelivered), ev-1 once (its duplicate acked), ev-bad once", attempts)
	}
	if d.Count(t, "SELECT COUNT(*) FROM benefit") != 3 || d.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE status = 'REJECTED'") != 1 {
		t.Fatal("want 3 benefits and one REJECTED mark")
	}
	retried := mq.Messages(rocketmq.RetryTopic("benefits"))
	if len(retried) != 1 || retried[0].Properties["RETRY_TOPIC"] != "ORDER_PAID" || retried[0].ReconsumeTimes != 1 {
		t.Fatalf("retry topic holds %+v", retried)
	}
	t.Logf("outcomes %v", outcomes)
}
