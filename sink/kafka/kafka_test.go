package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
	"github.com/outboxd/outboxd/testenv/kafkafault"
)

func TestConformance(t *testing.T) {
	sinktest.Run(t, newEnv(t).harness(nil))
}

func TestConformanceIdempotent(t *testing.T) {
	sinktest.Run(t, newEnv(t).harness(func(c *Config) { c.Idempotent = true }))
}

func keyed(topic string, n int, key func(i int) string) []*sink.Message {
	out := make([]*sink.Message, n)
	for i := range out {
		out[i] = &sink.Message{
			Topic:   topic,
			Key:     []byte(key(i)),
			Value:   []byte(fmt.Sprintf("v%d", i)),
			Headers: []sink.Header{{Key: "event_id", Value: []byte(fmt.Sprint(i))}},
			Time:    time.UnixMilli(1_700_000_000_000 + int64(i)),
		}
	}
	return out
}

func sendError(t *testing.T, err error) *sink.SendError {
	t.Helper()
	var se *sink.SendError
	if !errors.As(err, &se) {
		t.Fatalf("want *sink.SendError, got %v", err)
	}
	return se
}

// Placement must equal the Java client's default partitioner for keyed records; franz-go's
// StickyKeyPartitioner(nil) is that partitioner. Keys are checked both against the partitioner
// and against where a real franz-go producer puts them.
func TestPlacementMatchesJavaPartitioner(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	const parts = 7
	ours, theirs := e.topic(t, parts), e.topic(t, parts)
	msgs := keyed(ours, 300, func(i int) string { return fmt.Sprintf("order-%d", i*7919) })
	msgs = append(msgs, &sink.Message{Topic: ours, Key: []byte{}, Value: []byte("empty key")})
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tp := kgo.StickyKeyPartitioner(nil).ForTopic(ours)
	want := map[string]int{}
	for _, m := range msgs {
		r := &kgo.Record{Topic: theirs, Key: m.Key, Value: m.Value}
		want[string(m.Value)] = tp.Partition(r, parts)
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatalf("kgo produce: %v", err)
		}
	}
	viaKgo := map[string]int{}
	for _, r := range e.read(t, theirs, len(msgs)) {
		viaKgo[string(r.Value)] = r.Queue
	}
	got := e.read(t, ours, len(msgs))
	if len(got) != len(msgs) {
		t.Fatalf("read %d, want %d", len(got), len(msgs))
	}
	used := map[int]bool{}
	for _, r := range got {
		v := string(r.Value)
		used[r.Queue] = true
		if r.Queue != want[v] || r.Queue != viaKgo[v] {
			t.Errorf("key %q: partition %d, Java partitioner says %d, franz-go producer used %d", r.Key, r.Queue, want[v], viaKgo[v])
		}
	}
	if len(used) != parts {
		t.Errorf("300 keys used %d of %d partitions", len(used), parts)
	}
}

// One partition answering with an error code fails exactly that partition's messages; the
// rest are acknowledged and readable.
func TestPartitionErrorFailsOnlyThatPartition(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int16
		permanent bool
	}{
		{"NotEnoughReplicas", codeNotEnoughReplicas, false},
		// MESSAGE_TOO_LARGE makes the sink retry the batch one message per request (the broker
		// stores nothing of a rejected batch); the injection rejects those too.
		{"MessageTooLarge", codeMessageTooLarge, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.sink(t, nil)
			const parts = 5
			topic := e.topic(t, parts)
			msgs := keyed(topic, 100, func(i int) string { return fmt.Sprintf("k%d", i%25) })
			tp := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
			partOf := func(m *sink.Message) int { return tp.Partition(&kgo.Record{Key: m.Key}, parts) }
			const bad = 3
			e.failProduce(topic, bad, tc.code, -1)

			se := sendError(t, s.Send(context.Background(), msgs))
			failed := map[int]bool{}
			for k, f := range se.Failures {
				failed[f.Index] = true
				// After a single message is rejected, the partition's later messages are held
				// back, unsent and retryable.
				if k > 0 && errors.Is(f.Err, errNotSent) && !sink.IsPermanent(f.Err) {
					continue
				}
				if sink.IsPermanent(f.Err) != tc.permanent {
					t.Errorf("message %d: permanent=%v, want %v: %v", f.Index, sink.IsPermanent(f.Err), tc.permanent, f.Err)
				}
				var code kafkago.Error
				if !errors.As(f.Err, &code) || int16(code) != tc.code {
					t.Errorf("message %d: error %v does not carry code %d", f.Index, f.Err, tc.code)
				}
			}
			var acked int
			for i, m := range msgs {
				if (partOf(m) == bad) != failed[i] {
					t.Errorf("message %d in partition %d: failed=%v", i, partOf(m), failed[i])
				}
				if !failed[i] {
					acked++
				}
			}
			if acked == 0 || acked == len(msgs) {
				t.Fatalf("acked %d of %d: the test needs some of each", acked, len(msgs))
			}
			got := e.read(t, topic, acked)
			if len(got) != acked {
				t.Fatalf("stored %d, want exactly the %d acknowledged", len(got), acked)
			}
			for _, r := range got {
				if r.Queue == bad {
					t.Errorf("record %q stored in the failing partition", r.Value)
				}
			}
		})
	}
}

// A response that never comes fails the batch transiently after Timeout, without waiting
// for ctx.
func TestDroppedResponseTimesOut(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, func(c *Config) { c.Timeout = 500 * time.Millisecond })
	topic := e.topic(t, 3)
	if err := s.Send(context.Background(), keyed(topic, 1, func(int) string { return "warm" })); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	e.hold(t, topic, true)
	msgs := keyed(topic, 10, func(i int) string { return fmt.Sprint(i) })
	start := time.Now()
	se := sendError(t, s.Send(context.Background(), msgs))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Send took %v with a 500ms timeout", d)
	}
	if len(se.Failures) != len(msgs) {
		t.Errorf("%d of %d failed", len(se.Failures), len(msgs))
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Errorf("timeout classified permanent: %v", f.Err)
		}
	}
}

func TestOversizedFailsWithoutSending(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, func(c *Config) { c.MaxMessageBytes = 2000 })
	topic := e.topic(t, 1)
	n := e.countProduce(topic)
	m := &sink.Message{Topic: topic, Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 2000)}
	se := sendError(t, s.Send(context.Background(), []*sink.Message{m}))
	if len(se.Failures) != 1 || !sink.IsPermanent(se.Failures[0].Err) || !errors.Is(se.Failures[0].Err, errTooLarge) {
		t.Fatalf("failures %+v, want one permanent errTooLarge", se.Failures)
	}
	if n.Load() != 0 {
		t.Errorf("%d produce requests sent for an oversized message", n.Load())
	}
	// Just under the limit still goes through: the size check matches the encoding.
	m.Value = m.Value[:2000-singleBatchSize(&sink.Message{Topic: topic, Key: []byte("k"), Value: []byte{}})]
	for singleBatchSize(m) > 2000 {
		m.Value = m.Value[:len(m.Value)-1]
	}
	if err := s.Send(context.Background(), []*sink.Message{m}); err != nil {
		t.Fatalf("message of %d encoded bytes: %v", singleBatchSize(m), err)
	}
}

// Batches are cut at MaxMessageBytes and sent one after another; and when the broker's own
// message.max.bytes is lower than ours, a rejected batch is resent message by message. Either
// way everything is stored in order.
func TestBatchSplitting(t *testing.T) {
	t.Run("ByMaxMessageBytes", func(t *testing.T) {
		e := newEnv(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "3000"}))
		s := e.sink(t, func(c *Config) { c.MaxMessageBytes = 3000 })
		topic := e.topic(t, 1)
		n := e.countProduce(topic)
		msgs := keyed(topic, 30, func(int) string { return "same" })
		for _, m := range msgs {
			m.Value = append(m.Value, bytes.Repeat([]byte("."), 500)...)
		}
		if err := s.Send(context.Background(), msgs); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if n.Load() < 6 {
			t.Errorf("%d produce requests for 30×~530 bytes under a 3000-byte limit", n.Load())
		}
		checkInOrder(t, e.read(t, topic, len(msgs)), msgs)
	})
	t.Run("BrokerLimitLower", func(t *testing.T) {
		e := newEnv(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "3000"}))
		s := e.sink(t, nil) // 64 KiB: the first batch is rejected by the broker
		topic := e.topic(t, 1)
		msgs := keyed(topic, 20, func(int) string { return "same" })
		for _, m := range msgs {
			m.Value = append(m.Value, bytes.Repeat([]byte("."), 500)...)
		}
		if err := s.Send(context.Background(), msgs); err != nil {
			t.Fatalf("Send: %v", err)
		}
		checkInOrder(t, e.read(t, topic, len(msgs)), msgs)
	})
}

func checkInOrder(t *testing.T, got []sinktest.Received, want []*sink.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("stored %d, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("record %d is %.10q, want %.10q", i, got[i].Value, want[i].Value)
		}
	}
}

// A topic created after the sink cached metadata is found (the miss forces a refresh), while
// one that does not exist fails permanently; with auto-creation both sides asked, it is created.
func TestTopicDiscovery(t *testing.T) {
	t.Run("CreatedLater", func(t *testing.T) {
		e := newEnv(t)
		s := e.sink(t, nil)
		first := e.topic(t, 2)
		if err := s.Send(context.Background(), keyed(first, 3, itoa)); err != nil {
			t.Fatalf("Send: %v", err)
		}
		later := e.topic(t, 2)
		if err := s.Send(context.Background(), keyed(later, 3, itoa)); err != nil {
			t.Fatalf("Send to a topic created after the metadata was cached: %v", err)
		}
		if got := e.read(t, later, 3); len(got) != 3 {
			t.Fatalf("stored %d", len(got))
		}
	})
	t.Run("Unknown", func(t *testing.T) {
		e := newEnv(t)
		s := e.sink(t, nil)
		known := e.topic(t, 2)
		msgs := append(keyed("missing", 2, itoa), keyed(known, 2, func(i int) string { return "x" + fmt.Sprint(i) })...)
		se := sendError(t, s.Send(context.Background(), msgs))
		if len(se.Failures) != 2 || se.Failures[0].Index != 0 || se.Failures[1].Index != 1 {
			t.Fatalf("failures %v, want the two messages to the missing topic", se.Failures)
		}
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) || !sink.IsTopicMissing(f.Err) || !errors.Is(f.Err, errTopicMissing) || !strings.Contains(f.Err.Error(), "missing") {
				t.Errorf("failure %v: want a retryable topic-missing error naming the topic", f.Err)
			}
		}
		if err := s.Check(context.Background(), []string{known, "missing"}); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("Check = %v, want an error naming the missing topic", err)
		}
		if err := s.Check(context.Background(), []string{known}); err != nil {
			t.Errorf("Check of an existing topic: %v", err)
		}
	})
	t.Run("AutoCreate", func(t *testing.T) {
		e := newEnv(t, kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
		s := e.sink(t, func(c *Config) { c.AllowAutoTopicCreation = true })
		if err := s.Check(context.Background(), []string{"fresh"}); err != nil {
			t.Errorf("Check with auto-creation allowed: %v", err)
		}
		msgs := keyed("fresh", 5, itoa)
		var err error
		for range 20 { // the first answer may be LEADER_NOT_AVAILABLE while the topic is created
			if err = s.Send(context.Background(), msgs); err == nil {
				break
			}
			for _, f := range sendError(t, err).Failures {
				if sink.IsPermanent(f.Err) {
					t.Fatalf("auto-created topic: permanent failure %v", f.Err)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("Send to auto-created topic: %v", err)
		}
		if got := e.read(t, "fresh", 5); len(got) != 5 {
			t.Fatalf("stored %d", len(got))
		}
	})
	t.Run("BrokerAutoCreateOff", func(t *testing.T) {
		e := newEnv(t) // kfake refuses auto-creation although the client asks
		s := e.sink(t, func(c *Config) { c.AllowAutoTopicCreation = true })
		se := sendError(t, s.Send(context.Background(), keyed("fresh", 1, itoa)))
		if err := se.Failures[0].Err; sink.IsPermanent(err) || !sink.IsTopicMissing(err) {
			t.Fatalf("want a retryable topic-missing error, got %v", err)
		}
	})
}

// Moving a partition's leader makes the first produce fail with NOT_LEADER (transient); the
// failure forces a metadata refresh so the resend reaches the new leader.
func TestLeaderMove(t *testing.T) {
	e := newEnv(t, kfake.NumBrokers(3))
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	if err := s.Send(context.Background(), keyed(topic, 1, itoa)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	old := e.c.LeaderFor(topic, 0)
	next := (old + 1) % 3
	if err := e.c.MoveTopicPartition(topic, 0, next); err != nil {
		t.Fatalf("moving partition: %v", err)
	}
	msgs := keyed(topic, 3, func(int) string { return "k" })
	err := s.Send(context.Background(), msgs)
	if err != nil {
		se := sendError(t, err)
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) {
				t.Fatalf("leader move gave a permanent failure: %v", f.Err)
			}
		}
		if err := s.Send(context.Background(), msgs); err != nil {
			t.Fatalf("resend after the leader moved: %v", err)
		}
	}
	if got := e.read(t, topic, 4); len(got) != 4 {
		t.Fatalf("stored %d, want 4", len(got))
	}
}

func TestCheckUnreachable(t *testing.T) {
	s, err := New("down", Config{Brokers: []string{"127.0.0.1:1"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	if err := s.Check(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Check against a closed port = %v", err)
	}
	se := sendError(t, s.Send(context.Background(), keyed("t", 2, itoa)))
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Errorf("unreachable broker classified permanent: %v", f.Err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v with a 1s timeout", d)
	}
}

func TestSendAfterClose(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	_ = s.Close()
	se := sendError(t, s.Send(context.Background(), keyed("t", 2, itoa)))
	if len(se.Failures) != 2 || sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("failures %v, want 2 transient", se.Failures)
	}
}

func TestInvalidMessages(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 2)
	msgs := []*sink.Message{
		{Topic: topic, Key: []byte("a"), Value: []byte("0")},
		nil,
		{Key: []byte("a"), Value: []byte("no topic")},
		{Topic: topic, Key: []byte("a"), Value: []byte("3")},
		{Topic: topic, Key: []byte("b"), Value: []byte("4")},
		{Topic: topic, Value: []byte("nil key")},
	}
	se := sendError(t, s.Send(context.Background(), msgs))
	want := map[int]bool{1: true, 2: true, 3: false} // index -> permanent
	if len(se.Failures) != len(want) {
		t.Fatalf("failures %v, want indexes 1, 2, 3", se.Failures)
	}
	for _, f := range se.Failures {
		perm, ok := want[f.Index]
		if !ok || sink.IsPermanent(f.Err) != perm {
			t.Errorf("failure %d: %v (permanent=%v), want listed=%v permanent=%v", f.Index, f.Err, sink.IsPermanent(f.Err), ok, perm)
		}
	}
	if got := e.read(t, topic, 3); len(got) != 3 {
		t.Errorf("stored %d, want 3", len(got))
	}
}

func TestConfigValidate(t *testing.T) {
	_, err := New("bad", Config{Brokers: []string{"nohost"}, Timeout: -1, MaxMessageBytes: 10, Compression: 9})
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"brokers[0]", "timeout", "max_message_bytes", "compression"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if _, err := New("none", Config{}); err == nil || !strings.Contains(err.Error(), "brokers") {
		t.Errorf("empty brokers: %v", err)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err       error
		permanent bool
		missing   bool // sink.IsTopicMissing: retryable, bounded by the pipeline
	}{
		{kafkago.MessageSizeTooLarge, true, false},
		{fmt.Errorf("x: %w", kafkago.InvalidTopic), true, false}, // a bad name never appears
		{kafkago.TopicAuthorizationFailed, true, false},
		{kafkago.RecordListTooLarge, true, false},
		{kafkago.InvalidRecord, true, false},
		{fmt.Errorf("t: %w", errTopicMissing), false, true},
		{fmt.Errorf("produce: %w", kafkago.UnknownTopicOrPartition), false, true},
		{kafkago.NotEnoughReplicas, false, false},
		{kafkago.NotLeaderForPartition, false, false},
		{kafkago.LeaderNotAvailable, false, false}, // a topic being created: has a name already
		{kafkago.RequestTimedOut, false, false},
		{context.DeadlineExceeded, false, false},
		{errors.New("dial tcp: connection refused"), false, false},
		{fmt.Errorf("held back (%v): %w", kafkago.InvalidRecord, errNotSent), false, false},
		{fmt.Errorf("held back (%v): %w", errTopicMissing, errNotSent), false, false},
	} {
		got := classify(tc.err)
		if sink.IsPermanent(got) != tc.permanent || sink.IsTopicMissing(got) != tc.missing {
			t.Errorf("classify(%v): permanent=%v missing=%v, want %v %v", tc.err,
				sink.IsPermanent(got), sink.IsTopicMissing(got), tc.permanent, tc.missing)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
	if got := classify(kafkago.InvalidTimestamp); !sink.IsPermanent(got) || !errors.Is(got, kafkago.InvalidTimestamp) ||
		!strings.Contains(got.Error(), "message.timestamp.after.max.ms") || !strings.Contains(got.Error(), "outboxd_source_clock_offset_seconds") {
		t.Errorf("classify(INVALID_TIMESTAMP) = %v: want it permanent, naming the topic settings and the clock offset gauge", got)
	}
}

func TestRecordSizeMatchesEncoding(t *testing.T) {
	// kfake rejects a batch whose encoded bytes exceed message.max.bytes exactly; a message
	// whose computed size equals the limit must pass and one byte more must be rejected.
	const limit = 1500
	e := newEnv(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(limit)}))
	s := e.sink(t, func(c *Config) { c.MaxMessageBytes = 4096 }) // let the broker decide
	topic := e.topic(t, 1)
	m := &sink.Message{Topic: topic, Key: []byte("key"), Headers: []sink.Header{{Key: "h", Value: []byte("v")}, {Key: "n"}},
		Time: time.UnixMilli(1_700_000_000_000)}
	for singleBatchSize(m) < limit {
		m.Value = append(m.Value, 'x')
	}
	if singleBatchSize(m) != limit {
		t.Fatalf("size jumped past %d", limit)
	}
	if err := s.Send(context.Background(), []*sink.Message{m}); err != nil {
		t.Fatalf("exactly %d bytes: %v", limit, err)
	}
	m2 := *m
	m2.Value = append(append([]byte{}, m.Value...), 'x')
	se := sendError(t, s.Send(context.Background(), []*sink.Message{&m2}))
	if !errors.Is(se.Failures[0].Err, kafkago.MessageSizeTooLarge) || !sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("one byte over: %v", se.Failures[0].Err)
	}
}

func itoa(i int) string { return fmt.Sprint(i) }

// When one batch of a partition fails, the batches after it are not sent (they would overtake
// the failed one on resend) and are reported failed; the batches before it stay acknowledged.
func TestFailedBatchStopsPartition(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, func(c *Config) { c.MaxMessageBytes = 3000 })
	topic := e.topic(t, 1)
	n := e.countProduce(topic)
	var seen atomic.Int64
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if !hasTopic(req, topic, -1) || seen.Add(1) != 2 {
			return nil, nil, false
		}
		return kafkafault.ProduceError(req, codeNotEnoughReplicas), nil, true
	})
	msgs := keyed(topic, 30, func(int) string { return "same" })
	for _, m := range msgs {
		m.Value = append(m.Value, bytes.Repeat([]byte("."), 500)...)
	}
	chunks := chunk(msgs, func() []int {
		idx := make([]int, len(msgs))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}(), 3000)
	if len(chunks) < 3 {
		t.Fatalf("%d chunks; the test needs at least 3", len(chunks))
	}
	se := sendError(t, s.Send(context.Background(), msgs))
	first := len(chunks[0])
	if len(se.Failures) != len(msgs)-first || se.Failures[0].Index != first {
		t.Fatalf("failures from %d (%d of them), want from %d on", se.Failures[0].Index, len(se.Failures), first)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("%d produce requests, want 2 (nothing after the failed batch)", got)
	}
	checkInOrder(t, e.read(t, topic, first), msgs[:first])
}
