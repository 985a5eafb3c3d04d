package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	kit "github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/rmqpush"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/examples/benefits"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// outboxd → the RocketMQ test broker → the real push consumer with the kit and the example's
// work: an event id and a key that outboxd must send base64-encoded arrive decoded; a row
// delivered twice grants once; a bad payload is rejected and quarantined; a transient failure
// goes through %RETRY%group and is granted on its redelivery.
func TestRocketMQConsumerKit(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"ORDER_PAID"}, Queues: 2, RetryDelay: 200 * time.Millisecond})
	startRelay(t, rmqCfg(t, w, rc, "  - sink: rmq\n    topic: ORDER_PAID\n"), daemon.Options{})

	ctx := t.Context()
	db, err := w.srv.DB(ctx, w.schema+"_benefits")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	k, err := benefits.Setup(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	pay := func(id string, order int) row {
		return row{EventID: id, Key: "k\x01", Topic: "order.paid", Payload: fmt.Appendf(nil, `{"order_id": %d, "customer": "c", "amount_cents": 1500}`, order)}
	}
	bad := row{EventID: "paid-3", Key: "c", Topic: "order.paid", Payload: []byte("not json")}
	w.commit(pay("paid-1", 1), pay("base64:paid-2", 2))
	w.commit(pay("paid-1", 1), bad, pay("paid-4", 4)) // paid-1 a second time, as a resend would

	var mu sync.Mutex
	attempts := map[string]int{}
	keys := map[string]bool{}
	fn := func(ctx context.Context, tx *sql.Tx, m kit.Message) error {
		mu.Lock()
		attempts[m.EventID]++
		n := attempts[m.EventID]
		keys[string(m.Key)] = true
		mu.Unlock()
		if m.EventID == "paid-4" && n == 1 {
			return errors.New("benefit service down")
		}
		return benefits.Grant(ctx, tx, m)
	}
	c, err := rmqconsumer.NewPushConsumer(rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{rc.NameServer()})),
		rmqconsumer.WithGroupName("benefits"), rmqconsumer.WithInstance(fmt.Sprintf("e2e-kit-%d", os.Getpid())),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("ORDER_PAID", rmqconsumer.MessageSelector{}, rmqpush.Listener(k, fn, rmqpush.Options{})); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })

	count := func(q string) int {
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for count("SELECT COUNT(*) FROM consumed_event") < 4 || count("SELECT COUNT(*) FROM benefit") < 3 {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("within 30s: %d marks, %d benefits; attempts %v; %d messages stored", count("SELECT COUNT(*) FROM consumed_event"),
				count("SELECT COUNT(*) FROM benefit"), attempts, len(rc.Messages("ORDER_PAID")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong extra run

	rows, err := db.Query("SELECT event_id FROM benefit ORDER BY order_id")
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		granted = append(granted, id)
	}
	if got := strings.Join(granted, " "); got != "paid-1 base64:paid-2 paid-4" {
		t.Fatalf("benefits for %s, want paid-1 base64:paid-2 paid-4", got)
	}
	if count("SELECT COUNT(*) FROM consumed_event WHERE event_id = 'paid-3' AND status = 'REJECTED'") != 1 ||
		count("SELECT COUNT(*) FROM quarantined_event WHERE event_id = 'paid-3' AND payload = 'not json' AND error LIKE '%not a paid order%'") != 1 {
		t.Fatal("paid-3 not rejected and quarantined")
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts["paid-1"] != 1 || attempts["paid-4"] != 2 || attempts["base64:paid-2"] != 1 {
		t.Fatalf("attempts %v: want paid-1 once (its second delivery a duplicate), paid-4 twice", attempts)
	}
	var ks []string
	for k := range keys {
		ks = append(ks, fmt.Sprintf("%q", k))
	}
	sort.Strings(ks)
	if len(ks) != 2 || !keys["k\x01"] || !keys["c"] {
		t.Fatalf("keys seen %v, want \"c\" and \"k\\x01\" decoded", ks)
	}
	// What the consumer decoded was encoded on the wire.
	encoded := 0
	for _, m := range rc.Messages("ORDER_PAID") {
		if m.Keys == "base64:YmFzZTY0OnBhaWQtMg==" && m.Properties["SHARDING_KEY"] == "base64:awE=" {
			encoded++
		}
	}
	if encoded != 1 {
		t.Fatalf("%d stored messages carry base64:paid-2 and key k\\x01 encoded, want 1", encoded)
	}
	if n := len(rc.Messages(rocketmq.RetryTopic("benefits"))); n != 1 {
		t.Fatalf("%d messages in the retry topic, want paid-4's one", n)
	}
}
