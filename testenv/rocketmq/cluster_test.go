package rocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func TestMain(m *testing.M) {
	// The client logs every route refresh at info level to stdout.
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

var producerSeq atomic.Int64

type sender interface {
	SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error)
	Shutdown() error
}

// newProducer starts the real client's producer against c with internal
// retries off and an instance name of its own (producers sharing an instance
// name share one client, and NewDefaultProducer fails if their NameServers differ).
func newProducer(t *testing.T, c *Cluster, opts ...producer.Option) sender {
	t.Helper()
	n := producerSeq.Add(1)
	base := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{c.NameServer()})),
		producer.WithRetry(0),
		producer.WithInstanceName(fmt.Sprintf("testenv-%d-%d", os.Getpid(), n)),
		producer.WithGroupName(fmt.Sprintf("testenv-group-%d", n)),
		producer.WithSendMsgTimeout(2 * time.Second),
	}
	p, err := producer.NewDefaultProducer(append(base, opts...)...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("start producer: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

func startCluster(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.Log == nil {
		o.Log = tLogWriter{t}
	}
	c, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSendSyncStoresEverything(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"orders"}})
	p := newProducer(t, c)
	ctx := ctxT(t, 20*time.Second)

	for i := range 6 {
		m := primitive.NewMessage("orders", []byte(fmt.Sprintf("body-%d", i)))
		m.WithKeys([]string{fmt.Sprintf("k%d", i), "other"})
		m.WithTag("tagA")
		m.WithProperty("event_id", fmt.Sprintf("ev-%d", i))
		res, err := p.SendSync(ctx, m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send %d: status %v, want SendOK", i, res.Status)
		}
		q := c.QueueMessages("orders", res.MessageQueue.QueueId)
		var got *Message
		for j := range q {
			if q[j].Offset == res.QueueOffset {
				got = &q[j]
			}
		}
		if got == nil {
			t.Fatalf("send %d: no stored message at queue %d offset %d", i, res.MessageQueue.QueueId, res.QueueOffset)
		}
		if string(got.Body) != fmt.Sprintf("body-%d", i) || got.Keys != fmt.Sprintf("k%d other", i) || got.Tags != "tagA" ||
			got.Properties["event_id"] != fmt.Sprintf("ev-%d", i) {
			t.Fatalf("send %d: stored %+v", i, got)
		}
		if got.MsgID == "" || got.MsgID != res.MsgID || got.Properties["UNIQ_KEY"] != res.MsgID {
			t.Fatalf("send %d: stored MsgID %q, result MsgID %q", i, got.MsgID, res.MsgID)
		}
		if got.OffsetMsgID != res.OffsetMsgID {
			t.Fatalf("send %d: OffsetMsgID %q, result %q", i, got.OffsetMsgID, res.OffsetMsgID)
		}
		if time.Since(got.BornTime) > time.Minute || got.StoredAt.Before(got.BornTime.Add(-time.Second)) {
			t.Fatalf("send %d: born %v stored %v", i, got.BornTime, got.StoredAt)
		}
	}
	all := c.Messages("orders")
	if len(all) != 6 {
		t.Fatalf("stored %d messages, want 6", len(all))
	}
	// The default selector is round robin: 6 sends over 4 queues use them all.
	seen := map[int]bool{}
	for i, m := range all {
		seen[m.Queue] = true
		if i > 0 && (m.Queue < all[i-1].Queue || m.Queue == all[i-1].Queue && m.Offset != all[i-1].Offset+1) {
			t.Fatalf("Messages not ordered by (queue, offset): %d/%d after %d/%d", m.Queue, m.Offset, all[i-1].Queue, all[i-1].Offset)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("round robin used queues %v, want all 4", seen)
	}
	reqs := c.Requests()
	if reqs[ReqGetRouteInfo] == 0 || reqs[ReqSendMessage] != 6 {
		t.Fatalf("requests %v: want route lookups and 6 SEND_MESSAGE", reqs)
	}
}

func TestCompressedBodyIsInflated(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"big"}})
	p := newProducer(t, c)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB, over the 4 KiB threshold
	msg := primitive.NewMessage("big", body)
	if _, err := p.SendSync(ctxT(t, 20*time.Second), msg); err != nil {
		t.Fatal(err)
	}
	if !msg.Compress {
		t.Fatal("client did not compress a 16 KiB body; the test would not cover inflation")
	}
	got := c.Messages("big")
	if len(got) != 1 || !bytes.Equal(got[0].Body, body) {
		t.Fatalf("stored %d messages, body equal=%v", len(got), len(got) == 1 && bytes.Equal(got[0].Body, body))
	}
}

func TestNonOKStatusesAreNotErrors(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	ctx := ctxT(t, 30*time.Second)
	cases := []struct {
		code int
		want primitive.SendStatus
	}{
		{CodeFlushDiskTimeout, primitive.SendFlushDiskTimeout},
		{CodeSlaveNotAvailable, primitive.SendSlaveNotAvailable},
		{CodeFlushSlaveTimeout, primitive.SendFlushSlaveTimeout},
	}
	stored := 0
	for _, tc := range cases {
		for _, store := range []bool{true, false} {
			remove := c.Inject(Fault{Topic: "t", Code: tc.code, Store: store, Count: 1})
			res, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
			remove()
			if err != nil {
				t.Fatalf("code %d: err %v, want nil (the client reports these as a status)", tc.code, err)
			}
			if res.Status != tc.want {
				t.Fatalf("code %d: status %v, want %v", tc.code, res.Status, tc.want)
			}
			if store {
				stored++
			}
			if n := len(c.Messages("t")); n != stored {
				t.Fatalf("code %d store=%v: %d stored, want %d", tc.code, store, n, stored)
			}
		}
	}
}

func TestErrorCodes(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	ctx := ctxT(t, 30*time.Second)
	for _, code := range []int{CodeSystemError, CodeSystemBusy, CodeMessageIllegal, CodeNoPermission, CodeTopicNotExist, 215} {
		remove := c.Inject(Fault{Code: code})
		_, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
		remove()
		want := fmt.Sprintf("CODE: %d, DESC: ", code)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("code %d: err %v, want prefix %q", code, err, want)
		}
		t.Logf("code %d -> %v", code, err)
	}
	if n := len(c.Messages("t")); n != 0 {
		t.Fatalf("%d messages stored on error answers", n)
	}
	// The fault is gone: the next send succeeds.
	if res, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x"))); err != nil || res.Status != primitive.SendOK {
		t.Fatalf("after removing faults: %v %v", res, err)
	}
}

// TestClientRetriesSomeCodes documents the client's internal retry: with
// WithRetry(n) it resends on codes 1, 14, 16 and 17 but not on others.
func TestClientRetriesSomeCodes(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c, producer.WithRetry(2))
	ctx := ctxT(t, 30*time.Second)

	c.Inject(Fault{Code: CodeSystemError, Count: 1})
	before := c.Requests()[ReqSendMessage]
	res, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send with one SYSTEM_ERROR and retries: %v %v", res, err)
	}
	if n := c.Requests()[ReqSendMessage] - before; n != 2 {
		t.Fatalf("client sent %d requests, want 2 (one internal retry)", n)
	}

	c.Inject(Fault{Code: CodeSystemBusy, Count: 1})
	before = c.Requests()[ReqSendMessage]
	if _, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x"))); err == nil {
		t.Fatal("SYSTEM_BUSY: no error")
	}
	if n := c.Requests()[ReqSendMessage] - before; n != 1 {
		t.Fatalf("SYSTEM_BUSY: client sent %d requests, want 1 (not retried)", n)
	}
}

func TestFaultMatchAndCount(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t", "u"}})
	p := newProducer(t, c)
	ctx := ctxT(t, 30*time.Second)
	c.Inject(Fault{Topic: "t", Count: 2, Code: CodeSystemError,
		Match: func(m Message) bool { return m.Keys == "bad" }})
	send := func(topic, key string) error {
		m := primitive.NewMessage(topic, []byte(key))
		m.WithKeys([]string{key})
		_, err := p.SendSync(ctx, m)
		return err
	}
	for _, step := range []struct {
		topic, key string
		fail       bool
	}{{"t", "good", false}, {"u", "bad", false}, {"t", "bad", true}, {"t", "bad", true}, {"t", "bad", false}} {
		if err := send(step.topic, step.key); (err != nil) != step.fail {
			t.Fatalf("%s/%s: err %v, want failure=%v", step.topic, step.key, err, step.fail)
		}
	}
}

func TestDelayPastTimeout(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c, producer.WithSendMsgTimeout(300*time.Millisecond))
	ctx := ctxT(t, 20*time.Second)
	c.Inject(Fault{Delay: time.Second, Count: 1, Store: true})
	start := time.Now()
	_, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("slow")))
	if !errors.Is(err, rmqerrors.ErrRequestTimeout) {
		t.Fatalf("err %v, want request timeout", err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("send returned after %v, want about the 300ms send timeout", d)
	}
	// The broker stored it: a resend after a timeout duplicates.
	if n := len(c.Messages("t")); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
	// The late answer does not confuse the next send on the same connection.
	time.Sleep(800 * time.Millisecond)
	if res, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("next"))); err != nil || res.Status != primitive.SendOK {
		t.Fatalf("next send: %v %v", res, err)
	}
}

func TestDropAndNoReply(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c, producer.WithSendMsgTimeout(500*time.Millisecond))
	ctx := ctxT(t, 20*time.Second)
	for _, f := range []Fault{{Drop: true, Count: 1}, {NoReply: true, Count: 1}} {
		_, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
		if err != nil {
			t.Fatalf("warm-up send: %v", err)
		}
		c.Inject(f)
		_, err = p.SendSync(ctx, primitive.NewMessage("t", []byte("lost")))
		// A closed connection does not fail the pending request in this
		// client: it waits for its send timeout.
		if !errors.Is(err, rmqerrors.ErrRequestTimeout) {
			t.Fatalf("%+v: err %v, want request timeout", f, err)
		}
		if res, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("after"))); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("%+v: send after fault: %v %v", f, res, err)
		}
	}
	for _, m := range c.Messages("t") {
		if string(m.Body) == "lost" {
			t.Fatal("message stored although the fault had Store=false")
		}
	}
}

func TestBrokerOutage(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c, producer.WithSendMsgTimeout(time.Second))
	ctx := ctxT(t, 30*time.Second)
	if _, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("before"))); err != nil {
		t.Fatal(err)
	}
	c.StopBroker()
	_, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("during")))
	if err == nil {
		t.Fatal("send succeeded with the broker stopped")
	}
	t.Logf("send during outage: %v", err)
	if err := c.StartBroker(); err != nil {
		t.Fatal(err)
	}
	var res *primitive.SendResult
	// The client may still hold the closed connection for a moment.
	for range 20 {
		if res, err = p.SendSync(ctx, primitive.NewMessage("t", []byte("after"))); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send after restart: %v %v", res, err)
	}
	var bodies []string
	for _, m := range c.Messages("t") {
		bodies = append(bodies, string(m.Body))
	}
	if len(bodies) != 2 || !strings.Contains(strings.Join(bodies, ","), "before") {
		t.Fatalf("stored %v, want before and after", bodies)
	}
}

func TestUnknownTopic(t *testing.T) {
	c := startCluster(t, Options{})
	p := newProducer(t, c)
	_, err := p.SendSync(ctxT(t, 20*time.Second), primitive.NewMessage("nope", []byte("x")))
	if err == nil || !strings.Contains(err.Error(), "route info not found") {
		t.Fatalf("err %v, want route info not found", err)
	}
	if c.Requests()[ReqGetRouteInfo] == 0 || c.Requests()[ReqSendMessage] != 0 {
		t.Fatalf("requests %v", c.Requests())
	}
}

func TestAutoCreateTopic(t *testing.T) {
	c := startCluster(t, Options{AutoCreateTopics: true, Queues: 8})
	p := newProducer(t, c)
	res, err := p.SendSync(ctxT(t, 20*time.Second), primitive.NewMessage("fresh", []byte("x")))
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send: %v %v", res, err)
	}
	if got := c.Messages("fresh"); len(got) != 1 {
		t.Fatalf("stored %d", len(got))
	}
	// Created from TBW102, capped at the client's DefaultTopicQueueNums (4).
	c.mu.Lock()
	n := len(c.topics["fresh"].queues)
	c.mu.Unlock()
	if n != 4 {
		t.Fatalf("auto-created topic has %d queues, want 4", n)
	}
}

func TestSendToDeletedTopicAnswers17(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	ctx := ctxT(t, 20*time.Second)
	if _, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	delete(c.topics, "t") // the client keeps its cached route
	c.mu.Unlock()
	_, err := p.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
	if err == nil || !strings.HasPrefix(err.Error(), "CODE: 17, DESC: topic[t] not exist") {
		t.Fatalf("err %v", err)
	}
}

func TestBatchSend(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	var msgs []*primitive.Message
	for i := range 5 {
		m := primitive.NewMessage("t", []byte(fmt.Sprintf("b%d", i)))
		m.WithKeys([]string{fmt.Sprintf("k%d", i)})
		m.WithTag("T")
		m.WithProperty("user", fmt.Sprintf("u%d", i))
		msgs = append(msgs, m)
	}
	res, err := p.SendSync(ctxT(t, 20*time.Second), msgs...)
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("batch send: %v %v", res, err)
	}
	if c.Requests()[ReqSendBatchMessage] != 1 {
		t.Fatalf("requests %v, want one SEND_BATCH_MESSAGE", c.Requests())
	}
	got := c.QueueMessages("t", res.MessageQueue.QueueId)
	if len(got) != 5 {
		t.Fatalf("stored %d in queue %d, want 5", len(got), res.MessageQueue.QueueId)
	}
	for i, m := range got {
		if string(m.Body) != fmt.Sprintf("b%d", i) || m.Keys != fmt.Sprintf("k%d", i) || m.Tags != "T" ||
			m.Offset != res.QueueOffset+int64(i) || m.MsgID == "" || m.Properties["user"] != fmt.Sprintf("u%d", i) ||
			!m.Batch || m.Request != got[0].Request {
			t.Fatalf("batch item %d: %+v", i, m)
		}
	}
	if _, err := p.SendSync(ctxT(t, 20*time.Second), primitive.NewMessage("t", []byte("alone"))); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Messages("t") {
		if string(m.Body) == "alone" && (m.Batch || m.Request == got[0].Request) {
			t.Fatalf("single message stored as part of the batch: %+v", m)
		}
	}
	if ids := strings.Split(res.OffsetMsgID, ","); len(ids) != 5 {
		t.Fatalf("OffsetMsgID %q, want 5 ids", res.OffsetMsgID)
	}
}

// TestPerKeyQueueOrder uses the hash selector as the sink does: each sharding
// key maps to one queue, and that queue holds the key's messages in send order.
func TestPerKeyQueueOrder(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	ctx := ctxT(t, 30*time.Second)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	queueOf := map[string]int{}
	for i := range 60 {
		k := keys[i%len(keys)]
		m := primitive.NewMessage("t", []byte(fmt.Sprintf("%s:%d", k, i)))
		m.WithShardingKey(k)
		res, err := p.SendSync(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if q, ok := queueOf[k]; ok && q != res.MessageQueue.QueueId {
			t.Fatalf("key %s went to queues %d and %d", k, q, res.MessageQueue.QueueId)
		}
		queueOf[k] = res.MessageQueue.QueueId
	}
	for q := range 4 {
		last := map[string]int{}
		for _, m := range c.QueueMessages("t", q) {
			var k string
			var i int
			if _, err := fmt.Sscanf(strings.Replace(string(m.Body), ":", " ", 1), "%s %d", &k, &i); err != nil {
				t.Fatal(err)
			}
			if m.Properties["SHARDING_KEY"] != k || queueOf[k] != q {
				t.Fatalf("message %q in queue %d, key's queue %d", m.Body, q, queueOf[k])
			}
			if prev, ok := last[k]; ok && i <= prev {
				t.Fatalf("queue %d: %s:%d after %s:%d", q, k, i, k, prev)
			}
			last[k] = i
		}
	}
}

func TestWaitMessages(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	go func() {
		time.Sleep(100 * time.Millisecond)
		for range 3 {
			_, _ = p.SendSync(context.Background(), primitive.NewMessage("t", []byte("x")))
		}
	}()
	got, err := c.WaitMessages(ctxT(t, 20*time.Second), "t", 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("WaitMessages: %d %v", len(got), err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	got, err = c.WaitMessages(short, "t", 10)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 3 {
		t.Fatalf("WaitMessages past deadline: %d %v", len(got), err)
	}
}

func TestACL(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}, ACL: &ACL{AccessKey: "ak", SecretKey: "sk"}})
	ctx := ctxT(t, 20*time.Second)
	good := newProducer(t, c, producer.WithCredentials(primitive.Credentials{AccessKey: "ak", SecretKey: "sk"}))
	if res, err := good.SendSync(ctx, primitive.NewMessage("t", []byte("x"))); err != nil || res.Status != primitive.SendOK {
		t.Fatalf("signed send: %v %v", res, err)
	}
	for _, cred := range []primitive.Credentials{{AccessKey: "ak", SecretKey: "wrong"}, {}} {
		bad := newProducer(t, c, producer.WithCredentials(cred))
		_, err := bad.SendSync(ctx, primitive.NewMessage("t", []byte("x")))
		if err == nil || !strings.HasPrefix(err.Error(), "CODE: 1, DESC: AclException") {
			t.Fatalf("credentials %+v: err %v", cred, err)
		}
	}
	if n := len(c.Messages("t")); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
}

func TestFixedPortsRestart(t *testing.T) {
	c1 := startCluster(t, Options{Topics: []string{"t"}})
	bp, np := c1.BrokerAddr(), c1.NameServer()
	c1.Close()
	var port = func(a string) int {
		var p int
		fmt.Sscanf(a[strings.LastIndex(a, ":")+1:], "%d", &p)
		return p
	}
	c2 := startCluster(t, Options{Topics: []string{"t"}, BrokerPort: port(bp), NameServerPort: port(np)})
	if c2.BrokerAddr() != bp || c2.NameServer() != np {
		t.Fatalf("restarted on %s/%s, want %s/%s", c2.BrokerAddr(), c2.NameServer(), bp, np)
	}
}

// TestBinaryHeaderRequest speaks the ROCKETMQ binary header serialization
// (which the Go client never uses, but Java clients can) over a raw connection.
func TestBinaryHeaderRequest(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	conn, err := net.Dial("tcp", c.BrokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &command{Code: ReqSendMessageV2, Version: 317, Opaque: 42, serialize: serializeRocketMQ,
		ExtFields: map[string]string{"a": "g", "b": "t", "e": "3", "f": "0", "g": "1700000000000", "i": "KEYS\x01k\x02"},
		Body:      []byte("raw")}
	frame, err := encodeFrame(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := readFrame(conn)
	if err != nil {
		t.Fatal(err)
	}
	if resp.serialize != serializeRocketMQ || !resp.isResponse() || resp.Opaque != 42 || resp.Code != CodeSuccess ||
		resp.ExtFields["queueId"] != "3" || resp.ExtFields["queueOffset"] != "0" {
		t.Fatalf("response %+v", resp)
	}
	got := c.QueueMessages("t", 3)
	if len(got) != 1 || string(got[0].Body) != "raw" || got[0].Keys != "k" || got[0].BornTime.UnixMilli() != 1700000000000 {
		t.Fatalf("stored %+v", got)
	}
}

// TestClientHeartbeats documents the cadence: the client heartbeats 1 s after
// Start (and every 30 s) to brokers it learned from routes.
func TestClientHeartbeats(t *testing.T) {
	c := startCluster(t, Options{Topics: []string{"t"}})
	p := newProducer(t, c)
	if _, err := p.SendSync(ctxT(t, 10*time.Second), primitive.NewMessage("t", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Requests()[ReqHeartbeat] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat within 5s; requests %v", c.Requests())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
