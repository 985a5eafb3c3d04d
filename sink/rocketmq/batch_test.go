package rocketmq

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// requests groups stored messages by the request that stored them, in storage order.
func requests(ms []rocketmq.Message) map[int64][]rocketmq.Message {
	out := map[int64][]rocketmq.Message{}
	for _, m := range ms {
		out[m.Request] = append(out[m.Request], m)
	}
	return out
}

// TestKeyQueueSameAloneAndInBatch: a key lands in the queue its hash picks (the client's own
// hash selector's placement) whether its message is sent alone or in a batch.
func TestKeyQueueSameAloneAndInBatch(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 8)
	var keys []string
	for i := range 32 {
		keys = append(keys, fmt.Sprintf("order-%d", i))
	}
	alone := keyed(topic, keys, 1)
	for _, m := range alone {
		if err := s.Send(t.Context(), []*sink.Message{m}); err != nil {
			t.Fatalf("Send alone: %v", err)
		}
	}
	batched := keyed(topic, keys, 3)[len(keys):] // seq 1 and 2
	if err := s.Send(t.Context(), batched); err != nil {
		t.Fatalf("Send batched: %v", err)
	}
	stored := wait(t, c, topic, len(keys)*3)
	checkFirstOccurrences(t, stored, keys, 3)
	var nAlone, nBatched int
	for _, m := range stored {
		k, seq, _ := strings.Cut(string(m.Body), "/")
		if want := int(keyHash([]byte(k)) % 8); m.Queue != want {
			t.Errorf("%s (batch=%v) in queue %d, want %d", m.Body, m.Batch, m.Queue, want)
		}
		switch {
		case seq == "0" && !m.Batch:
			nAlone++
		case seq != "0" && m.Batch:
			nBatched++
		default:
			t.Errorf("%s: batch=%v", m.Body, m.Batch)
		}
	}
	if nAlone != len(keys) || nBatched != 2*len(keys) {
		t.Errorf("%d sent alone, %d in batches; want %d and %d", nAlone, nBatched, len(keys), 2*len(keys))
	}
	if got := len(requests(stored)); got != len(keys)+8 {
		t.Errorf("%d requests stored the messages, want %d alone and one batch per queue (8)", got, len(keys))
	}
}

// TestBatchKeepsEachMessagesProperties: inside a batch every message keeps its own KEYS, TAGS,
// SHARDING_KEY, user properties and a UNIQ_KEY of its own, its body uncompressed, and the
// debug log names each one.
func TestBatchKeepsEachMessagesProperties(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	var logBuf syncBuffer
	s := newSink(t, c, func(cfg *Config) { cfg.Logger = zerolog.New(&logBuf).Level(zerolog.DebugLevel) })
	topic := newTopic(c, 1) // one queue: one batch
	// Over the client's 4 KiB compression threshold, which does not apply in a batch.
	big := bytes.Repeat([]byte("0123456789abcdef"), 600)
	var msgs []*sink.Message
	for i := range 6 {
		m := &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i%3)), Value: []byte(fmt.Sprintf("v%d", i)),
			EventID: fmt.Sprintf("ev-%d", i), Tag: fmt.Sprintf("tag-%d", i),
			Headers: []sink.Header{{Key: "event_id", Value: []byte(fmt.Sprintf("ev-%d", i))}, {Key: "seq", Value: []byte{byte(i)}}}}
		if i == 4 {
			m.Value = big
			m.Key = nil
		}
		msgs = append(msgs, m)
	}
	if err := s.Send(t.Context(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	stored := wait(t, c, topic, len(msgs))
	if reqs := requests(stored); len(reqs) != 1 || !stored[0].Batch {
		t.Fatalf("stored by %d requests (batch=%v), want one batch", len(reqs), stored[0].Batch)
	}
	uniq := map[string]bool{}
	for i, m := range stored {
		want := msgs[i]
		key, hs, err := DecodeProperties(m.Properties)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Body, want.Value) || m.Keys != want.EventID || m.Tags != want.Tag || !bytes.Equal(key, want.Key) ||
			(key == nil) != (want.Key == nil) {
			t.Errorf("message %d stored as body %.20q keys %q tags %q key %q", i, m.Body, m.Keys, m.Tags, key)
		}
		if len(hs) != 2 || string(hs[0].Value) != want.EventID || !bytes.Equal(hs[1].Value, []byte{byte(i)}) {
			t.Errorf("message %d: headers %q", i, hs)
		}
		id := m.Properties["UNIQ_KEY"]
		if len(id) != 32 || uniq[id] || m.MsgID != id {
			t.Errorf("message %d: UNIQ_KEY %q (msg id %q), want a unique client id", i, id, m.MsgID)
		}
		uniq[id] = true
	}
	logged := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logBuf.String()))
	for sc.Scan() {
		var line struct {
			MsgID       string `json:"msg_id"`
			OffsetMsgID string `json:"offset_msg_id"`
			EventID     string `json:"event_id"`
			Offset      int64
			Batch       int
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.MsgID == "" {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(line.EventID, "ev-%d", &i); err != nil || i >= len(stored) {
			t.Fatalf("log line %s", sc.Text())
		}
		m := stored[i]
		if line.MsgID != m.MsgID || line.OffsetMsgID != m.OffsetMsgID || line.Offset != m.Offset || line.Batch != len(msgs) {
			t.Errorf("log line %s does not match stored message %+v", sc.Text(), m)
		}
		logged[line.EventID] = true
	}
	if len(logged) != len(msgs) {
		t.Errorf("%d messages logged at debug, want %d", len(logged), len(msgs))
	}
}

// TestBatchBounds: no request carries more than maxBatchMessages messages or more than
// maxBatchBytes as stored; a message larger than the byte bound goes alone (and is then
// compressed by the client, arriving intact).
func TestBatchBounds(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	const maxMsgs, maxBytes = 5, 4096
	s := newSink(t, c, func(cfg *Config) { cfg.maxBatchMessages, cfg.maxBatchBytes = maxMsgs, maxBytes })
	topic := newTopic(c, 2)
	var keys []string
	for i := range 6 {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	msgs := keyed(topic, keys, 8)
	for i, m := range msgs {
		m.Headers = []sink.Header{{Key: "pad", Value: bytes.Repeat([]byte("."), 1+i*37%700)}}
	}
	huge := &sink.Message{Topic: topic, Key: []byte("key-0"), Value: bytes.Repeat([]byte("big "), 5000), EventID: "huge"}
	msgs = append(msgs, huge)
	msgs = append(msgs, keyed(topic, keys, 9)[8*len(keys):]...)
	if err := s.Send(t.Context(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	stored := wait(t, c, topic, len(msgs))
	for req, ms := range requests(stored) {
		size := 0
		for _, m := range ms {
			size += len(m.Body) + propertiesSize(m.Properties) + len(topic) + storedOverhead
		}
		if len(ms) > maxMsgs || len(ms) > 1 && size > maxBytes {
			t.Errorf("request %d stored %d messages of %d bytes, over the bounds %d and %d", req, len(ms), size, maxMsgs, maxBytes)
		}
		for _, m := range ms {
			if m.Keys == "huge" && (len(ms) != 1 || m.Batch || !bytes.Equal(m.Body, huge.Value)) {
				t.Errorf("the message over the byte bound was not sent alone and intact: %d messages in its request", len(ms))
			}
		}
	}
	if len(requests(stored)) > len(msgs)/2 {
		t.Errorf("%d requests for %d messages: not batched", len(requests(stored)), len(msgs))
	}
	// Each key's messages in order, the huge one between seq 7 and 8 of key-0.
	var order []string
	for _, m := range stored {
		if m.Keys == "huge" || strings.HasPrefix(string(m.Body), "key-0/") {
			order = append(order, m.Keys)
		}
	}
	if got := strings.Join(order, " "); !strings.Contains(got, "ev-key-0/7 huge ev-key-0/8") {
		t.Errorf("key-0 stored as %s", got)
	}
	checkFirstOccurrences(t, nonHuge(stored), keys, 9)
}

func nonHuge(ms []rocketmq.Message) []rocketmq.Message {
	var out []rocketmq.Message
	for _, m := range ms {
		if m.Keys != "huge" {
			out = append(out, m)
		}
	}
	return out
}

// TestFailedBatchStopsItsQueue: an error answer, a dropped connection, a timeout or a non-OK
// status on one batch fails that batch and everything behind it in its queue, retryably, and
// nothing else; nothing behind it is stored before it, and a resend keeps every key's order.
func TestFailedBatchStopsItsQueue(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, func(cfg *Config) { cfg.SendTimeout = time.Second; cfg.maxBatchMessages = 4 })
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for _, tc := range []struct {
		name  string
		fault rocketmq.Fault
		dups  bool // the failed batch may be stored too
		// queues of the topic: 1 where the fault would also fail the other queue's request
		// in flight on the same connection.
		queues uint32
	}{
		{"SYSTEM_BUSY", rocketmq.Fault{Code: rocketmq.CodeSystemBusy}, false, 2},
		{"SERVICE_NOT_AVAILABLE", rocketmq.Fault{Code: rocketmq.CodeServiceNotAvail}, false, 2},
		{"dropped connection", rocketmq.Fault{Drop: true}, false, 1},
		{"timeout, stored", rocketmq.Fault{Delay: 1500 * time.Millisecond, Store: true}, true, 2},
		{"SLAVE_NOT_AVAILABLE, stored", rocketmq.Fault{Code: rocketmq.CodeSlaveNotAvailable, Store: true}, true, 2},
		{"FLUSH_DISK_TIMEOUT", rocketmq.Fault{Code: rocketmq.CodeFlushDiskTimeout}, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := newTopic(c, int(tc.queues))
			msgs := keyed(topic, keys, 4)
			q := keyHash([]byte("b")) % tc.queues
			var lane []int // b's queue, in slice order
			for i, m := range msgs {
				if keyHash(m.Key)%tc.queues == q {
					lane = append(lane, i)
				}
			}
			if len(lane) < 12 || tc.queues > 1 && len(lane) == len(msgs) {
				t.Fatalf("b's queue holds %d of %d messages: pick other keys", len(lane), len(msgs))
			}
			// The lane's second batch: messages 4..7 of the lane.
			target := string(msgs[lane[5]].Value)
			f := tc.fault
			f.Topic, f.Count = topic, 1
			f.Match = func(m rocketmq.Message) bool { return string(m.Body) == target }
			defer c.Inject(f)()
			se := sendErr(t, s.Send(t.Context(), msgs))
			var failed []int
			for _, fl := range se.Failures {
				failed = append(failed, fl.Index)
				if sink.IsPermanent(fl.Err) {
					t.Errorf("message %d: permanent %v", fl.Index, fl.Err)
				}
			}
			if want := lane[4:]; fmt.Sprint(failed) != fmt.Sprint(want) {
				t.Fatalf("failed %v, want the failed batch and the rest of its queue %v", failed, want)
			}
			for _, fl := range se.Failures[4:] {
				if !errors.Is(fl.Err, errNotSent) {
					t.Errorf("message %d behind the failed batch: %v, want errNotSent", fl.Index, fl.Err)
				}
			}
			ok := len(msgs) - len(failed)
			if tc.dups {
				ok += 4
			}
			stored := wait(t, c, topic, ok)
			time.Sleep(50 * time.Millisecond)
			if stored = c.Messages(topic); len(stored) != ok {
				t.Fatalf("%d messages stored after the failure, want %d", len(stored), ok)
			}
			var resend []*sink.Message
			for _, i := range failed {
				resend = append(resend, msgs[i])
			}
			if err := s.Send(t.Context(), resend); err != nil {
				t.Fatalf("resend: %v", err)
			}
			checkFirstOccurrences(t, wait(t, c, topic, ok+len(resend)), keys, 4)
		})
	}
}

// TestPoisonInBatchFailsOnlyIt: a batch the broker refuses for good is resent one message at a
// time, so only the refused message is permanent, its key's followers are held back
// (retryable), and the queue's other messages, before and after it, are stored.
func TestPoisonInBatchFailsOnlyIt(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 1)
	keys := []string{"a", "b", "c"}
	msgs := keyed(topic, keys, 4)
	defer c.Inject(rocketmq.Fault{Topic: topic, Code: rocketmq.CodeMessageIllegal,
		Match: func(m rocketmq.Message) bool { return string(m.Body) == "b/1" }})()
	se := sendErr(t, s.Send(t.Context(), msgs))
	var failed []string
	for _, f := range se.Failures {
		v := string(msgs[f.Index].Value)
		failed = append(failed, v)
		if sink.IsPermanent(f.Err) != (v == "b/1") {
			t.Errorf("%s: permanent=%v: %v", v, sink.IsPermanent(f.Err), f.Err)
		}
	}
	if got := strings.Join(failed, " "); got != "b/1 b/2 b/3" {
		t.Fatalf("failed %s, want b/1 and its followers", got)
	}
	stored := wait(t, c, topic, len(msgs)-3)
	var got []string
	for _, m := range stored {
		got = append(got, string(m.Body))
	}
	if want := "a/0 b/0 c/0 a/1 c/1 a/2 c/2 a/3 c/3"; strings.Join(got, " ") != want {
		t.Fatalf("stored %s, want %s", strings.Join(got, " "), want)
	}
}

// TestSelectorHonoursBatchQueueCount: the selector places a request by the hint on its first
// message's Queue, and refuses a batch grouped for another queue count (its keys would not
// share a queue under the new one).
func TestSelectorHonoursBatchQueueCount(t *testing.T) {
	s := &Sink{queues: map[string]int{}}
	sel := selector{s}
	mqs := make([]*primitive.MessageQueue, 8)
	for i := range mqs {
		mqs[i] = &primitive.MessageQueue{Topic: "t", BrokerName: "b", QueueId: i}
	}
	hash := keyHash([]byte("some key"))
	for _, tc := range []struct {
		n       int
		refused bool
	}{{0, false}, {8, false}, {4, true}} {
		q := &primitive.MessageQueue{Topic: "t", QueueId: -1}
		h := &hint{hash: hash, n: tc.n}
		s.hints.Store(q, h)
		// What the client hands the selector for a batch: a new message with the first
		// message's Queue.
		got := sel.Select(&primitive.Message{Topic: "t", Queue: q, Batch: true}, mqs, "")
		switch {
		case tc.refused && (got != nil || h.refused.Load() != 8):
			t.Errorf("n=%d: selected %v (refused %d), want a refusal naming 8 queues", tc.n, got, h.refused.Load())
		case !tc.refused && (got == nil || got.QueueId != int(hash%8)):
			t.Errorf("n=%d: selected %v, want queue %d", tc.n, got, hash%8)
		}
		s.hints.Delete(q)
	}
	if s.queues["t"] != 8 {
		t.Errorf("selector recorded %d queues, want 8", s.queues["t"])
	}
}

// TestStaleQueueCountIsRetryable: batches grouped for a queue count the topic no longer has
// are not sent; they fail retryably and the next Send regroups them for the count the
// selector saw.
func TestStaleQueueCountIsRetryable(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	s := newSink(t, c, nil)
	topic := newTopic(c, 4)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	if err := s.Send(t.Context(), keyed(topic, keys, 1)); err != nil {
		t.Fatalf("first Send: %v", err)
	}
	s.mu.Lock()
	s.queues[topic] = 2 // as if the topic had shrunk since the sink last saw it
	s.mu.Unlock()
	msgs := keyed(topic, keys, 3)[len(keys):]
	se := sendErr(t, s.Send(t.Context(), msgs))
	if len(se.Failures) != len(msgs) {
		t.Fatalf("%d of %d failed, want all (every queue's batch grouped for 2 queues)", len(se.Failures), len(msgs))
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) || !errors.Is(f.Err, errQueuesChanged) && !errors.Is(f.Err, errNotSent) {
			t.Errorf("message %d: %v", f.Index, f.Err)
		}
	}
	if !errors.Is(se.Failures[0].Err, errQueuesChanged) || !strings.Contains(se.Failures[0].Err.Error(), "4 writable queues") {
		t.Errorf("first failure %v does not say the queue count changed", se.Failures[0].Err)
	}
	if n := len(c.Messages(topic)); n != len(keys) {
		t.Fatalf("%d messages stored, want only the first Send's %d", n, len(keys))
	}
	if err := s.Send(t.Context(), msgs); err != nil {
		t.Fatalf("resend: %v", err)
	}
	stored := wait(t, c, topic, len(keys)*3)
	checkFirstOccurrences(t, stored, keys, 3)
	for _, m := range stored {
		k, _, _ := strings.Cut(string(m.Body), "/")
		if want := int(keyHash([]byte(k)) % 4); m.Queue != want {
			t.Errorf("%s in queue %d, want %d", m.Body, m.Queue, want)
		}
	}
}
