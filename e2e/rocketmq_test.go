package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// rmqCluster starts the RocketMQ test NameServer and Broker with the topics (4 queues each).
func rmqCluster(t *testing.T, o rocketmq.Options) *rocketmq.Cluster {
	t.Helper()
	c, err := rocketmq.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func rmqSink(c *rocketmq.Cluster) string {
	return fmt.Sprintf("{type: rocketmq, nameservers: [%q], send_timeout: 1s}", c.NameServer())
}

// rmqCfg relays w's outbox table from its current position to the RocketMQ cluster rc, as
// sink "rmq", with routes (YAML list items).
func rmqCfg(t *testing.T, w *world, rc *rocketmq.Cluster, routes string) cfgOpts {
	return cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Sinks: map[string]string{"rmq": rmqSink(rc)}, Routes: routes,
	}
}

// waitRMQ waits until topic holds at least n messages.
func waitRMQ(t *testing.T, c *rocketmq.Cluster, topic string, n int, timeout time.Duration) []rocketmq.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ms, err := c.WaitMessages(ctx, topic, n)
	if err != nil {
		t.Fatalf("RocketMQ topic %s: %d messages, want %d: %v", topic, len(c.Messages(topic)), n, err)
	}
	return ms
}

// checkRMQKeyOrder fails unless each key's first deliveries are in commit order, all in one
// queue, and every committed event arrived. Keys holds the event id.
func checkRMQKeyOrder(t *testing.T, ms []rocketmq.Message, committed []string, keyOf map[string]string) {
	t.Helper()
	pos := map[string]int{}
	for i, id := range committed {
		pos[id] = i
	}
	// Messages come ordered by (queue, offset): within a queue, offset order is arrival order.
	seen := map[string]bool{}
	last := map[string]int{}
	queueOf := map[string]int{}
	for _, m := range ms {
		id := m.Keys
		if seen[id] {
			continue
		}
		seen[id] = true
		p, ok := pos[id]
		if !ok {
			t.Fatalf("unexpected message %q", id)
		}
		k := keyOf[id]
		if q, ok := queueOf[k]; ok && q != m.Queue {
			t.Fatalf("key %s in queues %d and %d", k, q, m.Queue)
		}
		queueOf[k] = m.Queue
		if l, ok := last[k]; ok && l > p {
			t.Fatalf("key %s: event %s (commit #%d) stored after commit #%d", k, id, p, l)
		}
		last[k] = p
	}
	for _, id := range committed {
		if !seen[id] {
			t.Fatalf("committed event %s never stored", id)
		}
	}
}

// End to end from MariaDB through outboxd to the RocketMQ test broker: the mapping, and per-key
// queue order equal to commit order.
func TestRocketMQDelivery(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"PAY_EVENT"}})
	o := rmqCfg(t, w, rc, "  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n    tag: \"{event_type}\"\n")
	startRelay(t, o, daemon.Options{})

	big := []byte(strings.Repeat("0123456789abcdef", 600)) // > 4 KiB: the client compresses it
	g1 := w.commit(
		row{EventID: "p1", Key: "acct-1", Topic: "pay.succeeded", EventType: str("PaySucceeded"), Payload: []byte(`{"amount":"9.99","memo":"咖啡 ☕"}`),
			Headers: str(`{"trace_id":"t-1","KEYS":"spoof","DELAY":"3","TAGS":"spoof","retries":2}`)},
		row{EventID: "p2", Key: "acct-2", Topic: "pay.succeeded", Payload: big},
	)
	var committed []string
	keyOf := map[string]string{"p1": "acct-1", "p2": "acct-2"}
	committed = append(committed, "p1", "p2")
	for i := 3; i <= 40; i++ {
		id := fmt.Sprintf("p%d", i)
		key := fmt.Sprintf("acct-%d", i%6)
		keyOf[id] = key
		committed = append(committed, id)
		w.commit(row{EventID: id, Key: key, Topic: "pay.refunded", EventType: str("Refunded"), Payload: []byte(id)})
	}
	ms := waitRMQ(t, rc, "PAY_EVENT", 40, 30*time.Second)
	checkRMQKeyOrder(t, ms, committed, keyOf)

	byID := map[string]rocketmq.Message{}
	for _, m := range ms {
		byID[m.Keys] = m
	}
	m1 := byID["p1"]
	if m1.Tags != "PaySucceeded" || string(m1.Body) != `{"amount":"9.99","memo":"咖啡 ☕"}` {
		t.Fatalf("p1: tags %q body %q", m1.Tags, m1.Body)
	}
	wantProps := map[string]string{"event_id": "p1", "event_type": "PaySucceeded", "outbox_table": w.schema + ".outbox_event",
		"outbox_gtid": g1, "trace_id": "t-1", "retries": "2", "KEYS": "p1", "TAGS": "PaySucceeded"}
	for k, v := range wantProps {
		if m1.Properties[k] != v {
			t.Errorf("p1 property %s = %q, want %q (all: %v)", k, m1.Properties[k], v, m1.Properties)
		}
	}
	if d, ok := m1.Properties["DELAY"]; ok {
		t.Errorf("a row header set the system property DELAY=%q", d)
	}
	if m2 := byID["p2"]; string(m2.Body) != string(big) || m2.Tags != "" {
		t.Fatalf("p2: %d bytes, tags %q", len(m2.Body), m2.Tags)
	}
}

// For each non-OK send status and a timeout, the checkpoint does not pass the message until a
// later SEND_OK, and the message is then stored.
func TestRocketMQNonOKStatusIsNotAnAck(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"T"}})
	o := rmqCfg(t, w, rc, "  - sink: rmq\n    topic: T\n")
	startRelay(t, o, daemon.Options{})
	first := w.commit(row{EventID: "warmup", Key: "k", Topic: "t", Payload: []byte("w")})
	waitRMQ(t, rc, "T", 1, 20*time.Second)
	waitCheckpoint(t, o.Dir, first, 10*time.Second)

	faults := []struct {
		name  string
		fault rocketmq.Fault
	}{
		{"FLUSH_DISK_TIMEOUT", rocketmq.Fault{Code: 10, Store: true}},
		{"SLAVE_NOT_AVAILABLE", rocketmq.Fault{Code: 11, Store: true}},
		{"FLUSH_SLAVE_TIMEOUT", rocketmq.Fault{Code: 12, Store: false}},
		{"timeout", rocketmq.Fault{Delay: 1500 * time.Millisecond}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			id := "ev-" + f.name
			f.fault.Topic = "T"
			f.fault.Match = func(m rocketmq.Message) bool { return m.Keys == id }
			remove := rc.Inject(f.fault)
			before := readCheckpoint(t, o.Dir)
			g := w.commit(row{EventID: id, Key: "k", Topic: "t", Payload: []byte(id)})
			// While every send of it gets the fault, the checkpoint stays before it.
			time.Sleep(2 * time.Second)
			if got := readCheckpoint(t, o.Dir); got != before {
				t.Fatalf("checkpoint moved from %s to %s without SEND_OK", before, got)
			}
			remove()
			waitCheckpoint(t, o.Dir, g, 20*time.Second)
			found := false
			for _, m := range rc.Messages("T") {
				found = found || m.Keys == id
			}
			if !found {
				t.Fatalf("%s: never stored", id)
			}
		})
	}
}

// kill -9 during a RocketMQ outage, restart after it: no committed row is lost.
func TestRocketMQOutageAndCrash(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"T"}})
	o := rmqCfg(t, w, rc, "  - sink: rmq\n    topic: T\n")
	cfgPath := writeCfg(t, o)
	p := startBinary(t, "run", "--config", cfgPath)
	var committed []string
	keyOf := map[string]string{}
	commit := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("ev%03d", i)
			keyOf[id] = fmt.Sprintf("k%d", i%5)
			w.commit(row{EventID: id, Key: keyOf[id], Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
		}
	}
	commit(0, 20)
	waitRMQ(t, rc, "T", 20, 30*time.Second)
	rc.StopBroker()
	commit(20, 60)
	time.Sleep(time.Second) // outboxd is now retrying against a broker that is gone
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	commit(60, 70)
	if err := rc.StartBroker(); err != nil {
		t.Fatal(err)
	}
	startBinary(t, "run", "--config", cfgPath)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms := rc.Messages("T")
		seen := map[string]bool{}
		for _, m := range ms {
			seen[m.Keys] = true
		}
		if len(seen) == len(committed) {
			checkRMQKeyOrder(t, ms, committed, keyOf)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed rows stored after the restart", len(seen), len(committed))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// One process routes some topics to Kafka and others to RocketMQ.
func TestKafkaAndRocketMQInOneProcess(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.created")
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"PAY_EVENT"}})
	rc2 := rmqCluster(t, rocketmq.Options{Topics: []string{"AUDIT"}})
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(), Tables: []string{w.schema + ".outbox_event"},
		Sinks: map[string]string{"kafka": kafkaSink(kc), "rmq": rmqSink(rc), "audit": rmqSink(rc2)},
		Routes: "  - match: {topic: \"order.*\"}\n    sink: kafka\n    topic: \"{topic}\"\n" +
			"  - match: {topic: \"pay.*\"}\n    sink: rmq\n    topic: PAY_EVENT\n" +
			"  - match: {topic: \"audit.*\"}\n    sink: audit\n    topic: AUDIT\n",
	}
	startRelay(t, o, daemon.Options{})
	w.commit(row{EventID: "o1", Key: "u1", Topic: "order.created", Payload: []byte("o")},
		row{EventID: "p1", Key: "u1", Topic: "pay.succeeded", Payload: []byte("p")},
		row{EventID: "a1", Key: "u1", Topic: "audit.login", Payload: []byte("a")})
	c := newConsumer(t, kc, "order.created")
	if rs := c.waitFor(1, 20*time.Second); header(rs[0], "event_id") != "o1" {
		t.Fatalf("kafka got %s", header(rs[0], "event_id"))
	}
	if ms := waitRMQ(t, rc, "PAY_EVENT", 1, 20*time.Second); ms[0].Keys != "p1" {
		t.Fatalf("rocketmq got %q", ms[0].Keys)
	}
	// The second RocketMQ cluster in the same process works too (distinct client instances).
	if ms := waitRMQ(t, rc2, "AUDIT", 1, 20*time.Second); ms[0].Keys != "a1" {
		t.Fatalf("second rocketmq cluster got %q", ms[0].Keys)
	}
}
