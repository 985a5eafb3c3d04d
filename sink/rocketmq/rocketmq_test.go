package rocketmq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

func TestMain(m *testing.M) {
	// The client logs every route refresh at info level; keep only its errors.
	RouteClientLog(zerolog.New(os.Stderr), zerolog.ErrorLevel)
	os.Exit(m.Run())
}

type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startCluster(t *testing.T, o rocketmq.Options) *rocketmq.Cluster {
	t.Helper()
	if o.Log == nil {
		o.Log = tLogWriter{t}
	}
	if o.Queues == 0 {
		o.Queues = 4
	}
	c, err := rocketmq.Start(o)
	if err != nil {
		t.Fatalf("start test cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newSink returns a sink against c, closed at cleanup.
func newSink(t *testing.T, c *rocketmq.Cluster, mod func(*Config)) *Sink {
	t.Helper()
	cfg := Config{NameServers: []string{c.NameServer()}, SendTimeout: 10 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(t.Name(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

var topicSeq atomic.Int64

func newTopic(c *rocketmq.Cluster, queues int) string {
	name := fmt.Sprintf("topic-%d", topicSeq.Add(1))
	c.CreateTopic(name, queues)
	return name
}

func received(t *testing.T, ms []rocketmq.Message) []sinktest.Received {
	t.Helper()
	out := make([]sinktest.Received, 0, len(ms))
	for _, m := range ms {
		key, hs, err := DecodeProperties(m.Properties)
		if err != nil {
			t.Fatalf("stored message %s: %v", m.MsgID, err)
		}
		out = append(out, sinktest.Received{Topic: m.Topic, Key: key, Value: m.Body, Headers: hs, Queue: m.Queue})
	}
	return out
}

func wait(t *testing.T, c *rocketmq.Cluster, topic string, n int) []rocketmq.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := c.WaitMessages(ctx, topic, n); err != nil {
		t.Fatal(err)
	}
	return c.Messages(topic)
}

func TestConformance(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) sink.Sink {
			s, err := New(t.Name(), Config{NameServers: []string{c.NameServer()}, SendTimeout: 10 * time.Second})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return s
		},
		Topic: func(t *testing.T) string { return newTopic(c, 4) },
		Read: func(t *testing.T, topic string, n int) []sinktest.Received {
			return received(t, wait(t, c, topic, n))
		},
		FailNext: func(t *testing.T, topic string, transient bool, count int) {
			if transient {
				t.Cleanup(c.Inject(rocketmq.Fault{Topic: topic, Count: count, Code: rocketmq.CodeSystemBusy}))
				return
			}
			// A permanent rejection is about what a message holds, so the broker refuses it
			// again when it is resent, alone or in another batch: the fault latches onto the
			// first count messages it sees and rejects every request carrying one of them.
			// (A rejection that went away on a resend would be transient; the sink resends
			// a batch refused for good one message at a time to find the culprit.)
			var mu sync.Mutex
			poison := map[string]bool{}
			t.Cleanup(c.Inject(rocketmq.Fault{Topic: topic, Code: rocketmq.CodeMessageIllegal, Match: func(m rocketmq.Message) bool {
				mu.Lock()
				defer mu.Unlock()
				if len(poison) < count {
					poison[string(m.Body)] = true
				}
				return poison[string(m.Body)]
			}}))
		},
		Hold: func(t *testing.T, topic string) func() {
			remove := c.Inject(rocketmq.Fault{Topic: topic, NoReply: true})
			t.Cleanup(remove)
			return remove
		},
		UnknownTopic:    "no-such-topic",
		CreateTopic:     func(_ *testing.T, topic string) { c.CreateTopic(topic, 4) },
		MaxMessageBytes: DefaultMaxMessageBytes,
		NoMessageTime:   true,
	})
	// The suite ran through batches, not only messages sent alone.
	if req := c.Requests(); req[rocketmq.ReqSendBatchMessage] == 0 || req[rocketmq.ReqSendMessage] == 0 {
		t.Errorf("requests %v: want both batches (320) and messages sent alone (10)", req)
	}
}

// keyed builds n messages per key, key-interleaved, valued "<key>/<seq>".
func keyed(topic string, keys []string, n int) []*sink.Message {
	var out []*sink.Message
	for seq := range n {
		for _, k := range keys {
			v := fmt.Sprintf("%s/%d", k, seq)
			out = append(out, &sink.Message{Topic: topic, Key: []byte(k), Value: []byte(v), EventID: "ev-" + v, Tag: "test"})
		}
	}
	return out
}

func sendErr(t *testing.T, err error) *sink.SendError {
	t.Helper()
	var se *sink.SendError
	if !errors.As(err, &se) || len(se.Failures) == 0 {
		t.Fatalf("Send: %v (%T), want a *sink.SendError with failures", err, err)
	}
	return se
}

// checkFirstOccurrences asserts that each key's stored messages are in one queue and their first
// occurrences run 0..n-1.
func checkFirstOccurrences(t *testing.T, stored []rocketmq.Message, keys []string, n int) {
	t.Helper()
	next := map[string]int{}
	queue := map[string]int{}
	seen := map[string]bool{}
	for _, m := range stored {
		k, seqText, _ := strings.Cut(string(m.Body), "/")
		if q, ok := queue[k]; ok && q != m.Queue {
			t.Errorf("key %s in queues %d and %d", k, q, m.Queue)
		}
		queue[k] = m.Queue
		if seen[string(m.Body)] {
			continue
		}
		seen[string(m.Body)] = true
		if want := fmt.Sprint(next[k]); seqText != want {
			t.Errorf("key %s: first occurrence of %s where %s was due", k, seqText, want)
		}
		next[k]++
	}
	for _, k := range keys {
		if next[k] != n {
			t.Errorf("key %s: %d distinct messages stored, want %d", k, next[k], n)
		}
	}
}

// TestNonOKStatusIsFailure: SendSync returns a nil error for FLUSH_DISK_TIMEOUT,
// SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT; the sink must fail the whole batch that got it
// (whether or not the broker stored it) and everything behind it in its queue, retryably, and
// nothing else.
func TestNonOKStatusIsFailure(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, code := range []int{rocketmq.CodeFlushDiskTimeout, rocketmq.CodeSlaveNotAvailable, rocketmq.CodeFlushSlaveTimeout} {
		for _, store := range []bool{true, false} {
			t.Run(fmt.Sprintf("code%d/store=%v", code, store), func(t *testing.T) {
				topic := newTopic(c, 4)
				msgs := keyed(topic, keys, 3)
				remove := c.Inject(rocketmq.Fault{Topic: topic, Count: 1, Code: code, Store: store,
					Match: func(m rocketmq.Message) bool { return string(m.Body) == "b/1" }})
				defer remove()
				var want []string // b's queue: one batch, failed as a whole
				for _, m := range msgs {
					if keyHash(m.Key)%4 == keyHash([]byte("b"))%4 {
						want = append(want, string(m.Value))
					}
				}
				if len(want) == 3 || len(want) == len(msgs) {
					t.Fatalf("b's queue holds %v: pick keys that share it with another and leave others out", want)
				}
				se := sendErr(t, s.Send(t.Context(), msgs))
				var failed []string
				var resend []*sink.Message
				for _, f := range se.Failures {
					failed = append(failed, string(msgs[f.Index].Value))
					resend = append(resend, msgs[f.Index])
					if sink.IsPermanent(f.Err) || !errors.Is(f.Err, errNotOK) {
						t.Errorf("failure %s: %v, want a transient non-OK failure", msgs[f.Index].Value, f.Err)
					}
				}
				if got := strings.Join(failed, " "); got != strings.Join(want, " ") {
					t.Fatalf("failed %q, want b's whole batch %q", got, strings.Join(want, " "))
				}
				if !strings.Contains(se.Failures[0].Err.Error(), statusName(statusFor(code))) {
					t.Errorf("first failure %v does not name the broker's status", se.Failures[0].Err)
				}
				if err := s.Send(t.Context(), resend); err != nil {
					t.Fatalf("resend: %v", err)
				}
				n := len(msgs)
				if store {
					n += len(want) // stored with the non-OK answer, and again by the resend
				}
				stored := wait(t, c, topic, n)
				if len(stored) != n {
					t.Fatalf("%d messages stored, want %d", len(stored), n)
				}
				checkFirstOccurrences(t, stored, keys, 3)
			})
		}
	}
}

func TestSystemPropertyHeadersAreDropped(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	var logBuf syncBuffer
	s := newSink(t, c, func(cfg *Config) { cfg.Logger = zerolog.New(&logBuf) })
	topic := newTopic(c, 4)
	m := &sink.Message{Topic: topic, Key: []byte("k"), Value: []byte("v"), EventID: "ev-1", Tag: "created",
		Headers: []sink.Header{
			{Key: "KEYS", Value: []byte("evil-keys")},
			{Key: "TAGS", Value: []byte("evil-tag")},
			{Key: "DELAY", Value: []byte("3")},
			{Key: "WAIT", Value: []byte("false")},
			{Key: "UNIQ_KEY", Value: []byte("forged")},
			{Key: "__STARTDELIVERTIME", Value: []byte("1")},
			{Key: "SHARDING_KEY", Value: []byte("other")},
			{Key: "event_type", Value: []byte("created")},
		}}
	for range 2 {
		if err := s.Send(t.Context(), []*sink.Message{m}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	stored := wait(t, c, topic, 2)
	for _, got := range stored {
		if got.Keys != "ev-1" || got.Tags != "created" {
			t.Errorf("Keys %q Tags %q, want ev-1 and created", got.Keys, got.Tags)
		}
		for _, p := range []string{"DELAY", "WAIT", "__STARTDELIVERTIME"} {
			if v, ok := got.Properties[p]; ok {
				t.Errorf("system property %s=%q set from a header", p, v)
			}
		}
		if got.Properties["UNIQ_KEY"] == "forged" || got.Properties["SHARDING_KEY"] != "k" {
			t.Errorf("UNIQ_KEY %q SHARDING_KEY %q", got.Properties["UNIQ_KEY"], got.Properties["SHARDING_KEY"])
		}
		if got.Properties["event_type"] != "created" {
			t.Errorf("user header lost: %v", got.Properties)
		}
	}
	if n := s.DroppedHeaders(); n != 14 {
		t.Errorf("DroppedHeaders %d, want 7 per Send", n)
	}
	if n := strings.Count(logBuf.String(), "header not sent"); n != 7 {
		t.Errorf("%d warnings about dropped headers, want one per name (7):\n%s", n, logBuf.String())
	}
}

// statusFor maps a broker code to the SendResult status the client makes of it.
func statusFor(code int) primitive.SendStatus {
	switch code {
	case rocketmq.CodeFlushDiskTimeout:
		return primitive.SendFlushDiskTimeout
	case rocketmq.CodeSlaveNotAvailable:
		return primitive.SendSlaveNotAvailable
	default:
		return primitive.SendFlushSlaveTimeout
	}
}

func TestTwoSinksTwoClusters(t *testing.T) {
	c1 := startCluster(t, rocketmq.Options{})
	c2 := startCluster(t, rocketmq.Options{})
	s1 := newSink(t, c1, nil)
	s2 := newSink(t, c2, nil)
	if s1.InstanceName() == s2.InstanceName() {
		t.Fatalf("both sinks use instance name %q", s1.InstanceName())
	}
	topic := newTopic(c1, 4)
	c2.CreateTopic(topic, 4)
	for i, s := range []*Sink{s1, s2} {
		msgs := keyed(topic, []string{fmt.Sprintf("sink%d", i)}, 3)
		if err := s.Send(t.Context(), msgs); err != nil {
			t.Fatalf("sink %d: %v", i, err)
		}
	}
	for i, c := range []*rocketmq.Cluster{c1, c2} {
		stored := wait(t, c, topic, 3)
		if len(stored) != 3 {
			t.Fatalf("cluster %d stored %d messages, want 3", i, len(stored))
		}
		for _, m := range stored {
			if !strings.HasPrefix(string(m.Body), fmt.Sprintf("sink%d/", i)) {
				t.Errorf("cluster %d stored %q", i, m.Body)
			}
		}
	}
}

func TestLargeBodyArrivesIntact(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 4)
	body := make([]byte, 256<<10) // over the client's 4 KiB compression threshold
	r := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(r.IntN(16)) // half-compressible
	}
	if err := s.Send(t.Context(), []*sink.Message{{Topic: topic, Key: []byte("big"), Value: body}}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	stored := wait(t, c, topic, 1)
	if !bytes.Equal(stored[0].Body, body) {
		t.Fatalf("body of %d bytes stored as %d different bytes", len(body), len(stored[0].Body))
	}
}

func TestSameKeySameQueueAcrossSends(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 8)
	var keys []string
	for i := range 24 {
		keys = append(keys, fmt.Sprintf("order-%d", i))
	}
	all := keyed(topic, keys, 4)
	for i := 0; i < len(all); i += len(keys) {
		if err := s.Send(t.Context(), all[i:i+len(keys)]); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	stored := wait(t, c, topic, len(all))
	checkFirstOccurrences(t, stored, keys, 4)
	used := map[int]bool{}
	for _, m := range stored {
		k, _, _ := strings.Cut(string(m.Body), "/")
		// The placement of the client's own hash selector for a text sharding key.
		if want := int(keyHash([]byte(k)) % 8); m.Queue != want {
			t.Errorf("key %s in queue %d, want %d", k, m.Queue, want)
		}
		used[m.Queue] = true
	}
	if len(used) < 3 {
		t.Errorf("24 keys used only queues %v", used)
	}
}

func TestSendResultLoggedAtDebug(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	var logBuf syncBuffer
	s := newSink(t, c, func(cfg *Config) { cfg.Logger = zerolog.New(&logBuf).Level(zerolog.DebugLevel) })
	topic := newTopic(c, 4)
	if err := s.Send(t.Context(), keyed(topic, []string{"k"}, 1)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	stored := wait(t, c, topic, 1)[0]
	sc := bufio.NewScanner(strings.NewReader(logBuf.String()))
	for sc.Scan() {
		var line struct {
			Level, Sink, Topic string
			MsgID              string `json:"msg_id"`
			OffsetMsgID        string `json:"offset_msg_id"`
			EventID            string `json:"event_id"`
			Queue              int
			Offset             int64
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.MsgID == "" {
			continue
		}
		if line.Level != "debug" || line.MsgID != stored.MsgID || line.OffsetMsgID != stored.OffsetMsgID ||
			line.Queue != stored.Queue || line.Offset != stored.Offset || line.EventID != "ev-k/0" ||
			line.Sink != t.Name() || line.Topic != topic {
			t.Fatalf("log line %s does not match stored message %+v", sc.Text(), stored)
		}
		return
	}
	t.Fatalf("no debug line with msg_id in:\n%s", logBuf.String())
}

func TestClassifyBrokerCodes(t *testing.T) {
	for _, tc := range []struct {
		err       error
		permanent bool
		missing   bool // sink.IsTopicMissing: retryable, bounded by the pipeline
	}{
		{fmt.Errorf("CODE: 13, DESC: the message is illegal"), true, false},
		{fmt.Errorf("CODE: 16, DESC: the broker[broker-a] sending message is forbidden"), true, false},
		{fmt.Errorf("CODE: 1, DESC: AclException: check signature failed"), false, false}, // ErrAuth: transient
		{fmt.Errorf("CODE: 1, DESC: store error"), false, false},
		{fmt.Errorf("CODE: 2, DESC: [TIMEOUT_CLEAN_QUEUE]broker busy"), false, false},
		{fmt.Errorf("CODE: 14, DESC: service not available"), false, false},
		{fmt.Errorf("CODE: 17  DESC: topic not exist"), false, false}, // unconfirmed by the NameServer
		{fmt.Errorf("wrapped: %w", errTopicMissing), false, true},
		{fmt.Errorf("CODE: 17  DESC: topic not exist: the NameServers have no route: %w", errTopicMissing), false, true},
		{errors.New("request timeout"), false, false},
		{errors.New("the topic=x route info not found"), false, false},
		{fmt.Errorf("%w: CODE: 13, DESC: illegal", context.Canceled), false, false},
		{fmt.Errorf("held back: %w (%w)", errNotSent, errTopicMissing), false, false},
		{fmt.Errorf("x: %w", errTooLarge), true, false},
	} {
		got := classify(tc.err)
		if sink.IsPermanent(got) != tc.permanent || sink.IsTopicMissing(got) != tc.missing {
			t.Errorf("classify(%q): permanent=%v missing=%v, want %v %v", tc.err,
				sink.IsPermanent(got), sink.IsTopicMissing(got), tc.permanent, tc.missing)
		}
	}
	for _, text := range []string{
		"the topic=x route info not found",        // this Go client
		"No route info of this topic: x",          // the Java client and proxies
		"send: CODE: 17  DESC: topic x not exist", // a broker's TOPIC_NOT_EXIST
	} {
		if !needsRouteCheck(errors.New(text)) {
			t.Errorf("needsRouteCheck(%q) = false", text)
		}
	}
	if needsRouteCheck(errors.New("CODE: 14  DESC: service not available")) {
		t.Error("needsRouteCheck(SERVICE_NOT_AVAILABLE) = true")
	}
	acl := classify(errors.New("CODE: 1, DESC: AclException: check signature failed for accessKey=ak"))
	if !errors.Is(acl, ErrAuth) || !strings.Contains(acl.Error(), "ACL") || !strings.Contains(acl.Error(), "accessKey=ak") {
		t.Errorf("ACL rejection: %v, want ErrAuth naming ACL and the access key", acl)
	}
	if again := classify(acl); again.Error() != acl.Error() {
		t.Errorf("classify wrapped ErrAuth twice: %v", again)
	}
	if c, ok := brokerCode(errors.New("send: CODE: 17  DESC: x")); !ok || c != 17 {
		t.Errorf("brokerCode with MQClientErr's format: %d %v", c, ok)
	}
	if _, ok := brokerCode(errors.New("CODE: abc")); ok {
		t.Error("brokerCode accepted a non-number")
	}
}

func TestUnknownTopicWhileNameServerDownIsTransient(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, func(cfg *Config) { cfg.SendTimeout = 2 * time.Second })
	c.Close()
	msgs := keyed("never-seen", []string{"a", "b"}, 2)
	se := sendErr(t, s.Send(t.Context(), msgs))
	if len(se.Failures) != len(msgs) {
		t.Fatalf("%d of %d failed", len(se.Failures), len(msgs))
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Errorf("message %d permanent although no NameServer answered: %v", f.Index, f.Err)
		}
	}
	if err := s.Check(t.Context(), []string{"never-seen"}); err == nil {
		t.Error("Check passed with the NameServer down")
	}
}

// TestTopicNotExistFromBrokerForKnownTopic: a broker's 17 for a topic the NameServer routes is
// a stale broker or route, not a missing topic.
func TestTopicNotExistFromBrokerForKnownTopic(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 4)
	remove := c.Inject(rocketmq.Fault{Topic: topic, Count: 1, Code: rocketmq.CodeTopicNotExist})
	defer remove()
	se := sendErr(t, s.Send(t.Context(), keyed(topic, []string{"a"}, 2)))
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Errorf("message %d: %v is permanent", f.Index, f.Err)
		}
	}
	if err := s.Send(t.Context(), keyed(topic, []string{"a"}, 2)); err != nil {
		t.Fatalf("resend: %v", err)
	}
}

func TestBrokerOutageIsTransient(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, func(cfg *Config) { cfg.SendTimeout = 2 * time.Second })
	topic := newTopic(c, 4)
	keys := []string{"a", "b", "c"}
	msgs := keyed(topic, keys, 2)
	if err := s.Send(t.Context(), msgs[:3]); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	c.StopBroker()
	se := sendErr(t, s.Send(t.Context(), msgs[3:]))
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Errorf("message %d permanent during a broker outage: %v", f.Index, f.Err)
		}
	}
	if err := c.StartBroker(); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 20 { // the client reconnects on the next request
		if err = s.Send(t.Context(), msgs[3:]); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	checkFirstOccurrences(t, wait(t, c, topic, len(msgs)), keys, 2)
}

func TestInvalidMessagesArePermanent(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, func(cfg *Config) { cfg.MaxMessageBytes = 1024 })
	topic := newTopic(c, 4)
	bigHeader := sink.Header{Key: "h", Value: bytes.Repeat([]byte("y"), 40000)}
	msgs := []*sink.Message{
		{Topic: topic, Key: []byte("a"), Value: nil},                                            // empty body
		{Topic: topic, Key: []byte("a2"), Value: []byte{}},                                      // empty_payload: send of an empty payload
		{Topic: "bad topic!", Key: []byte("b"), Value: []byte("x")},                             // invalid name
		{Topic: "TBW102", Key: []byte("c"), Value: []byte("x")},                                 // system topic
		{Topic: topic, Key: []byte("d"), Value: bytes.Repeat([]byte("x"), 1025)},                // over MaxMessageBytes
		{Topic: topic, Key: []byte("e"), Value: []byte("x"), Headers: []sink.Header{bigHeader}}, // properties too large
		nil,
		{Topic: topic, Key: []byte("ok"), Value: bytes.Repeat([]byte("x"), 1024)},
	}
	se := sendErr(t, s.Send(t.Context(), msgs))
	if len(se.Failures) != 7 {
		t.Fatalf("%d failures, want 7: %v", len(se.Failures), se)
	}
	for _, f := range se.Failures {
		if !sink.IsPermanent(f.Err) {
			t.Errorf("message %d: %v is not permanent", f.Index, f.Err)
		}
	}
	if got := wait(t, c, topic, 1); len(got) != 1 || string(got[0].Properties["SHARDING_KEY"]) != "ok" {
		t.Fatalf("stored %v", got)
	}
}

func TestBinaryKeyAndHeadersRoundTrip(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 4)
	m := &sink.Message{Topic: topic, Key: []byte{0xff, 0, 1, 2}, Value: []byte("v"), EventID: "ev",
		Headers: []sink.Header{
			{Key: "bin", Value: []byte{1, 2, 0xfe}},
			{Key: "empty", Value: []byte{}},
			{Key: "looks-encoded", Value: []byte("base64:AAAA")},
			{Key: "text", Value: []byte("héllo wörld")},
			{Key: "bad\x01name", Value: []byte("x")},
		}}
	if err := s.Send(t.Context(), []*sink.Message{m}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := received(t, wait(t, c, topic, 1))[0]
	if !bytes.Equal(got.Key, m.Key) {
		t.Errorf("key %q, want %q", got.Key, m.Key)
	}
	want := map[string]string{"bin": "\x01\x02\xfe", "empty": "", "looks-encoded": "base64:AAAA", "text": "héllo wörld"}
	if len(got.Headers) != len(want) {
		t.Errorf("headers %q, want %q", got.Headers, want)
	}
	for _, h := range got.Headers {
		if w, ok := want[h.Key]; !ok || w != string(h.Value) {
			t.Errorf("header %q=%q, want %q", h.Key, h.Value, w)
		}
	}
	if text := wait(t, c, topic, 1)[0].Properties["text"]; text != "héllo wörld" {
		t.Errorf("plain text header sent as %q", text)
	}
}

func TestACL(t *testing.T) {
	c := startCluster(t, rocketmq.Options{ACL: &rocketmq.ACL{AccessKey: "ak", SecretKey: "sk"}})
	topic := newTopic(c, 4)
	good := newSink(t, c, func(cfg *Config) { cfg.AccessKey, cfg.SecretKey = "ak", "sk" })
	if err := good.Send(t.Context(), keyed(topic, []string{"a"}, 1)); err != nil {
		t.Fatalf("Send with credentials: %v", err)
	}
	bad := newSink(t, c, func(cfg *Config) { cfg.AccessKey, cfg.SecretKey = "ak", "wrong" })
	se := sendErr(t, bad.Send(t.Context(), keyed(topic, []string{"b"}, 1)))
	ferr := se.Failures[0].Err
	if sink.IsPermanent(ferr) || !errors.Is(ferr, ErrAuth) || strings.Contains(se.Error(), "wrong") ||
		!strings.Contains(ferr.Error(), "access_key") || !strings.Contains(ferr.Error(), "accessKey=ak") {
		t.Fatalf("wrong secret: %v, want a transient ErrAuth naming the access key and not the secret", se)
	}
}

func TestNamespace(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	c.CreateTopic("ns1%orders", 4)
	s := newSink(t, c, func(cfg *Config) { cfg.Namespace = "ns1" })
	if err := s.Check(t.Context(), []string{"orders"}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := s.Send(t.Context(), keyed("orders", []string{"a", "b"}, 2)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := wait(t, c, "ns1%orders", 4); len(got) != 4 {
		t.Fatalf("stored %d", len(got))
	}
}

func TestCheck(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 4)
	if err := s.Check(t.Context(), nil); err != nil {
		t.Errorf("Check(nil): %v", err)
	}
	if err := s.Check(t.Context(), []string{topic}); err != nil {
		t.Errorf("Check(%s): %v", topic, err)
	}
	err := s.Check(t.Context(), []string{topic, "missing-a", "missing-b"})
	if err == nil || !strings.Contains(err.Error(), "missing-a") || !strings.Contains(err.Error(), "missing-b") || strings.Contains(err.Error(), topic+":") {
		t.Errorf("Check with missing topics: %v", err)
	}
}

func TestSendAfterCloseFails(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s, err := New("closing", Config{NameServers: []string{c.NameServer()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	se := sendErr(t, s.Send(t.Context(), keyed("t", []string{"a"}, 1)))
	if !errors.Is(se.Failures[0].Err, errClosed) || sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("Send after Close: %v", se)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{NameServers: []string{"ns1:9876", "127.0.0.1", ":9876"}, Group: "bad group", AccessKey: "a", SendTimeout: -1}.Validate()
	for _, want := range []string{"nameservers[1]", "want host:port", "nameservers[2]", "no host", "group", "access_key", "send_timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want mention of %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "nameservers[0]") {
		t.Errorf("Validate rejects a host name: %v", err)
	}
	if err := (Config{NameServers: []string{"127.0.0.1:9876", "rocketmq-namesrv.mq.svc:9876", "[::1]:9876"}}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if _, err := New("x", Config{}); err == nil {
		t.Error("New without NameServers succeeded")
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestCancelDuringRouteLookup: the client's route lookup ignores ctx (6 s per NameServer); Send
// must still return promptly when ctx ends.
func TestCancelDuringRouteLookup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
		}
	}()
	s, err := New("silent", Config{NameServers: []string{ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() { // before Close: end the client's abandoned lookup
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	se := sendErr(t, s.Send(ctx, keyed("t", []string{"a", "b"}, 2)))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Send returned after %v", d)
	}
	if len(se.Failures) != 4 {
		t.Errorf("%d failures, want 4", len(se.Failures))
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) || !errors.Is(f.Err, context.DeadlineExceeded) && !errors.Is(f.Err, errNotSent) {
			t.Errorf("message %d: %v, want a transient deadline failure", f.Index, f.Err)
		}
	}
}
