package rocketmq

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

type pushConsumer interface {
	Subscribe(topic string, selector consumer.MessageSelector, f func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)) error
	Start() error
	Shutdown() error
}

func startPushConsumer(t *testing.T, c *Cluster, name string, got chan<- string) pushConsumer {
	t.Helper()
	pc, err := consumer.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{c.NameServer()})),
		consumer.WithGroupName("g"), consumer.WithInstance(fmt.Sprintf("%s-%d", name, os.Getpid())),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe("T", consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			got <- string(m.Body)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	return pc
}

// The real push consumer: an idle consumer's pulls are suspended (a handful per second, not a
// busy loop) and a new message wakes them at once; its group offsets are committed; a second
// consumer in the group splits the queues, and when it shuts down the first takes them all.
//
// Not for -race: the client's own Shutdown writes rmqClient.close while a rebalance that the
// broker's NOTIFY_CONSUMER_IDS_CHANGED started reads it (a race inside rocketmq-client-go).
func TestPushConsumerGroup(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"T"}, Queues: 4})
	p := newProducer(t, c)
	send := func(body string) {
		t.Helper()
		if res, err := p.SendSync(context.Background(), primitive.NewMessage("T", []byte(body))); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send: %v %v", res, err)
		}
	}
	got := make(chan string, 100)
	recv := func(want string) {
		t.Helper()
		select {
		case b := <-got:
			if b != want {
				t.Fatalf("got %q, want %q", b, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q not delivered within 10s", want)
		}
	}
	a := startPushConsumer(t, c, "a", got)
	defer a.Shutdown()
	send("m1")
	recv("m1")

	before := c.Requests()[ReqPullMessage]
	time.Sleep(time.Second)
	if n := c.Requests()[ReqPullMessage] - before; n > 12 { // 5 queues (4 + the retry topic), each suspended
		t.Fatalf("%d pulls in an idle second: pulls are not suspended", n)
	} else {
		t.Logf("%d pulls in an idle second", n)
	}
	start := time.Now()
	send("m2")
	recv("m2")
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("a suspended pull took %s to deliver a new message", d)
	}

	b := startPushConsumer(t, c, "b", got)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.groups["g"].clients)
		c.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group has %d clients, want 2", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = b.Shutdown()
	for i := range 8 { // all four queues, whoever held them
		send(fmt.Sprintf("n%d", i))
	}
	seen := map[string]bool{}
	for range 8 {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("after b left, only %v delivered", seen)
		}
	}
	c.mu.Lock()
	offs := len(c.groups["g"].offsets)
	c.mu.Unlock()
	if offs == 0 {
		t.Fatal("no consumer offsets committed")
	}
}
