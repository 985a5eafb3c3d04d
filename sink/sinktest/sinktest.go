// Package sinktest is a conformance suite for sink.Sink implementations: every sink runs the
// same tests against a real broker (or a protocol-faithful fake) and reads back with a real
// client, so the contract in package sink is checked the same way for Kafka and RocketMQ.
package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// Received is one message read back from the broker.
type Received struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []sink.Header
	Time    time.Time
	// Queue is the partition (Kafka) or queue id (RocketMQ) the message was stored in.
	Queue int
}

// Harness connects the suite to one sink implementation and its broker.
type Harness struct {
	// New returns a sink connected to the harness's broker. The suite closes it. Its request
	// timeout must be at least 5 s, so that the cancellation test measures ctx, not a timeout.
	New func(t *testing.T) sink.Sink
	// Topic returns a fresh, existing, empty topic with at least 4 partitions (queues).
	Topic func(t *testing.T) string
	// Read blocks until at least n messages are stored in topic, failing the test after a
	// timeout, and returns every message stored in it: grouped by Queue, each queue in storage
	// order.
	Read func(t *testing.T, topic string, n int) []Received
	// FailNext makes the broker reject the next count produce requests carrying topic, with a
	// retryable error when transient and a permanent one otherwise. A rejected request stores
	// nothing.
	FailNext func(t *testing.T, topic string, transient bool, count int)
	// Hold makes the broker leave produce requests for topic unanswered until release is
	// called. release is idempotent; the harness must also release at test cleanup.
	Hold func(t *testing.T, topic string) (release func())
	// UnknownTopic is a topic that does not exist on the broker (and is not auto-created):
	// sends to it must fail as sink.IsTopicMissing, retryable and not permanent.
	UnknownTopic string
	// CreateTopic, if not nil, creates topic (with at least one partition or queue) on the
	// broker, so the suite can check that messages that failed for want of it are acknowledged
	// once it exists. The suite passes names of its own, derived from UnknownTopic.
	CreateTopic func(t *testing.T, topic string)
	// MaxMessageBytes is the sink's limit: a message with a value this long must fail
	// permanently.
	MaxMessageBytes int
	// NoMessageTime says the broker has no settable per-message timestamp (RocketMQ stamps
	// its own born/store time), so Read leaves Received.Time zero and the suite does not
	// compare it.
	NoMessageTime bool
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Run("AckedMeansStored", func(t *testing.T) { testAckedMeansStored(t, h) })
	t.Run("PerKeyOrder", func(t *testing.T) { testPerKeyOrder(t, h) })
	t.Run("PartialFailure", func(t *testing.T) { testPartialFailure(t, h) })
	t.Run("Classification", func(t *testing.T) { testClassification(t, h) })
	t.Run("ResendKeepsKeyOrder", func(t *testing.T) { testResendKeepsKeyOrder(t, h) })
	t.Run("CancelReturnsPromptly", func(t *testing.T) { testCancel(t, h) })
}

func newSink(t *testing.T, h Harness) sink.Sink {
	t.Helper()
	s := h.New(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// msg builds a message whose value identifies it: "<key>/<seq>".
func msg(topic, key string, seq int) *sink.Message {
	v := fmt.Sprintf("%s/%d", key, seq)
	return &sink.Message{
		Topic:   topic,
		Key:     []byte(key),
		Value:   []byte(v),
		Headers: []sink.Header{{Key: "event_id", Value: []byte("ev-" + v)}, {Key: "event_type", Value: []byte("test")}},
		Time:    time.UnixMilli(1_700_000_000_000 + int64(seq)),
		EventID: "ev-" + v,
	}
}

// interleaved returns keys×perKey messages, key-interleaved: k0/0 k1/0 … k0/1 k1/1 …
func interleaved(topic string, keys, perKey int) []*sink.Message {
	out := make([]*sink.Message, 0, keys*perKey)
	for seq := range perKey {
		for k := range keys {
			out = append(out, msg(topic, fmt.Sprintf("key-%03d", k), seq))
		}
	}
	return out
}

func sendErr(t *testing.T, err error) *sink.SendError {
	t.Helper()
	var se *sink.SendError
	if !errors.As(err, &se) {
		t.Fatalf("Send error %v (%T) is not a *sink.SendError", err, err)
	}
	if len(se.Failures) == 0 {
		t.Fatalf("SendError without failures: %v", err)
	}
	return se
}

// checkFailures validates a SendError's shape against the batch and the same-key rule, and
// returns the failed indexes.
func checkFailures(t *testing.T, msgs []*sink.Message, se *sink.SendError) map[int]error {
	t.Helper()
	failed := make(map[int]error, len(se.Failures))
	for k, f := range se.Failures {
		if f.Index < 0 || f.Index >= len(msgs) {
			t.Fatalf("failure %d has index %d outside the batch of %d", k, f.Index, len(msgs))
		}
		if k > 0 && f.Index <= se.Failures[k-1].Index {
			t.Fatalf("failures not sorted by unique index: %d after %d", f.Index, se.Failures[k-1].Index)
		}
		if f.Err == nil {
			t.Fatalf("failure %d has a nil Err", f.Index)
		}
		failed[f.Index] = f.Err
	}
	seenFail := map[string]int{}
	for i, m := range msgs {
		if m.Key == nil {
			continue
		}
		_, f := failed[i]
		if j, ok := seenFail[string(m.Key)]; ok && !f {
			t.Fatalf("message %d (key %q) reported acknowledged although earlier message %d with the same key failed", i, m.Key, j)
		}
		if f {
			if _, ok := seenFail[string(m.Key)]; !ok {
				seenFail[string(m.Key)] = i
			}
		}
	}
	return failed
}

func byValue(rs []Received) map[string][]Received {
	out := make(map[string][]Received, len(rs))
	for _, r := range rs {
		out[string(r.Value)] = append(out[string(r.Value)], r)
	}
	return out
}

func sortedHeaders(hs []sink.Header) []sink.Header {
	out := slices.Clone(hs)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return bytes.Compare(out[i].Value, out[j].Value) < 0
	})
	return out
}

// checkStored asserts that stored holds each of want exactly once, fields intact, and nothing
// else.
func checkStored(t *testing.T, h Harness, want []*sink.Message, stored []Received) {
	t.Helper()
	got := byValue(stored)
	for _, m := range want {
		rs := got[string(m.Value)]
		if len(rs) != 1 {
			t.Errorf("message %q stored %d times, want once", m.Value, len(rs))
			continue
		}
		r := rs[0]
		if r.Topic != m.Topic {
			t.Errorf("message %q: topic %q, want %q", m.Value, r.Topic, m.Topic)
		}
		if !bytes.Equal(r.Key, m.Key) || (r.Key == nil) != (m.Key == nil) {
			t.Errorf("message %q: key %q, want %q", m.Value, r.Key, m.Key)
		}
		if !slices.EqualFunc(sortedHeaders(r.Headers), sortedHeaders(m.Headers), func(a, b sink.Header) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		}) {
			t.Errorf("message %q: headers %v, want %v", m.Value, r.Headers, m.Headers)
		}
		if !h.NoMessageTime && !m.Time.IsZero() && !r.Time.Equal(m.Time.Truncate(time.Millisecond)) {
			t.Errorf("message %q: time %v, want %v", m.Value, r.Time, m.Time)
		}
		delete(got, string(m.Value))
	}
	for v := range got {
		t.Errorf("unexpected message %q stored", v)
	}
}

func testAckedMeansStored(t *testing.T, h Harness) {
	s := newSink(t, h)
	topic := h.Topic(t)
	msgs := interleaved(topic, 10, 5)
	// Edge cases a sink must carry through unchanged.
	msgs = append(msgs,
		&sink.Message{Topic: topic, Key: []byte("binary\x00key\xff"), Value: []byte("binary\x00value\xff"),
			Headers: []sink.Header{{Key: "h", Value: []byte{0, 1, 2}}}, Time: time.UnixMilli(1_600_000_000_123)},
		&sink.Message{Topic: topic, Key: []byte("no-headers"), Value: []byte("no headers"), Time: time.UnixMilli(1_600_000_000_456)},
		&sink.Message{Topic: topic, Key: []byte("big"), Value: bytes.Repeat([]byte("x"), h.MaxMessageBytes/2), Time: time.UnixMilli(1)},
	)
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	checkStored(t, h, msgs, h.Read(t, topic, len(msgs)))
}

func testPerKeyOrder(t *testing.T, h Harness) {
	s := newSink(t, h)
	topic := h.Topic(t)
	const keys, perKey, sends = 40, 12, 4
	all := interleaved(topic, keys, perKey)
	step := len(all) / sends
	for i := 0; i < len(all); i += step {
		if err := s.Send(context.Background(), all[i:min(i+step, len(all))]); err != nil {
			t.Fatalf("Send %d: %v", i/step, err)
		}
	}
	stored := h.Read(t, topic, len(all))
	checkStored(t, h, all, stored)
	checkKeyOrder(t, stored, keys, perKey, false)
}

// checkKeyOrder asserts that each key's messages are in one queue and, in storage order, their
// first occurrences run 0..perKey-1. With dups, a message may be stored more than once.
func checkKeyOrder(t *testing.T, stored []Received, keys, perKey int, dups bool) {
	t.Helper()
	queues := map[string]map[int]bool{}
	next := map[string]int{}
	seen := map[string]bool{}
	queuesUsed := map[int]bool{}
	for _, r := range stored {
		var key string
		var seq int
		if _, err := fmt.Sscanf(strings.Replace(string(r.Value), "/", " ", 1), "%s %d", &key, &seq); err != nil {
			t.Fatalf("unexpected value %q: %v", r.Value, err)
		}
		if key != string(r.Key) {
			t.Fatalf("value %q stored with key %q", r.Value, r.Key)
		}
		if queues[key] == nil {
			queues[key] = map[int]bool{}
		}
		queues[key][r.Queue] = true
		queuesUsed[r.Queue] = true
		if seen[string(r.Value)] {
			if !dups {
				t.Errorf("%q stored twice", r.Value)
			}
			continue
		}
		seen[string(r.Value)] = true
		if seq != next[key] {
			t.Errorf("key %s: first occurrence of seq %d where seq %d was due (order broken)", key, seq, next[key])
		}
		next[key] = seq + 1
	}
	if len(next) != keys {
		t.Errorf("%d keys stored, want %d", len(next), keys)
	}
	for k, n := range next {
		if n != perKey {
			t.Errorf("key %s: %d messages stored, want %d", k, n, perKey)
		}
		if len(queues[k]) != 1 {
			t.Errorf("key %s spread over queues %v, want one", k, queues[k])
		}
	}
	if keys >= 8 && len(queuesUsed) < 2 {
		t.Errorf("%d keys all in one queue: keys are not spread", keys)
	}
}

func testPartialFailure(t *testing.T, h Harness) {
	s := newSink(t, h)
	topic := h.Topic(t)
	msgs := interleaved(topic, 40, 5)
	h.FailNext(t, topic, true, 1)
	se := sendErr(t, s.Send(context.Background(), msgs))
	failed := checkFailures(t, msgs, se)
	if len(failed) == len(msgs) {
		t.Fatalf("all %d messages failed; one rejected request should fail only some", len(msgs))
	}
	var acked, resend []*sink.Message
	for i, m := range msgs {
		if _, f := failed[i]; f {
			resend = append(resend, m)
		} else {
			acked = append(acked, m)
		}
	}
	// Exactly the unlisted messages are stored: none of the failed ones.
	checkStored(t, h, acked, h.Read(t, topic, len(acked)))

	if err := s.Send(context.Background(), resend); err != nil {
		t.Fatalf("resending the %d failed messages: %v", len(resend), err)
	}
	checkStored(t, h, msgs, h.Read(t, topic, len(msgs)))
}

func testClassification(t *testing.T, h Harness) {
	t.Run("Transient", func(t *testing.T) {
		s := newSink(t, h)
		topic := h.Topic(t)
		msgs := interleaved(topic, 20, 3)
		h.FailNext(t, topic, true, 1)
		se := sendErr(t, s.Send(context.Background(), msgs))
		checkFailures(t, msgs, se)
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) {
				t.Errorf("failure %d after a transient rejection is permanent: %v", f.Index, f.Err)
			}
		}
	})
	t.Run("Permanent", func(t *testing.T) {
		s := newSink(t, h)
		topic := h.Topic(t)
		msgs := interleaved(topic, 20, 3)
		h.FailNext(t, topic, false, 1)
		se := sendErr(t, s.Send(context.Background(), msgs))
		failed := checkFailures(t, msgs, se)
		// Per key, the first failure is the rejected message itself; later ones may be held
		// back (and so retryable).
		firstSeen := map[string]bool{}
		for i, m := range msgs {
			err, f := failed[i]
			if !f || firstSeen[string(m.Key)] {
				continue
			}
			firstSeen[string(m.Key)] = true
			if !sink.IsPermanent(err) {
				t.Errorf("first failure of key %s (message %d) after a permanent rejection is not permanent: %v", m.Key, i, err)
			}
		}
	})
	t.Run("UnknownTopic", func(t *testing.T) {
		s := newSink(t, h)
		msgs := interleaved(h.UnknownTopic, 3, 2)
		se := sendErr(t, s.Send(context.Background(), msgs))
		if len(se.Failures) != len(msgs) {
			t.Fatalf("%d of %d messages to an unknown topic failed", len(se.Failures), len(msgs))
		}
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) || !sink.IsTopicMissing(f.Err) {
				t.Errorf("message %d to unknown topic: permanent=%v topic-missing=%v, want a retryable topic-missing error: %v",
					f.Index, sink.IsPermanent(f.Err), sink.IsTopicMissing(f.Err), f.Err)
			}
		}
	})
	t.Run("TopicCreatedLater", func(t *testing.T) {
		if h.CreateTopic == nil {
			t.Skip("the harness cannot create topics")
		}
		s := newSink(t, h)
		topic := h.UnknownTopic + "-later-" + strings.ReplaceAll(strings.ReplaceAll(t.Name(), "/", "-"), "_", "-")
		msgs := interleaved(topic, 3, 2)
		se := sendErr(t, s.Send(context.Background(), msgs))
		failed := checkFailures(t, msgs, se)
		if len(failed) != len(msgs) {
			t.Fatalf("%d of %d messages to a topic that does not exist yet failed", len(failed), len(msgs))
		}
		for i, err := range failed {
			if sink.IsPermanent(err) || !sink.IsTopicMissing(err) {
				t.Fatalf("message %d before the topic exists: want a retryable topic-missing error, got %v", i, err)
			}
		}
		h.CreateTopic(t, topic)
		deadline := time.Now().Add(20 * time.Second)
		pending := msgs
		for {
			err := s.Send(context.Background(), pending)
			if err == nil {
				break
			}
			se := sendErr(t, err)
			failed := checkFailures(t, pending, se)
			for i, err := range failed {
				if sink.IsPermanent(err) {
					t.Fatalf("message %d after the topic was created: permanent %v", i, err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("still failing 20s after the topic was created: %v", err)
			}
			var next []*sink.Message
			for i, m := range pending {
				if _, f := failed[i]; f {
					next = append(next, m)
				}
			}
			pending = next
			time.Sleep(200 * time.Millisecond)
		}
		got := byValue(h.Read(t, topic, len(msgs)))
		for _, m := range msgs {
			if len(got[string(m.Value)]) != 1 {
				t.Errorf("message %q stored %d times after the topic was created", m.Value, len(got[string(m.Value)]))
			}
		}
	})
	t.Run("TooLarge", func(t *testing.T) {
		s := newSink(t, h)
		topic := h.Topic(t)
		big := msg(topic, "big", 0)
		big.Value = bytes.Repeat([]byte("x"), h.MaxMessageBytes+1)
		follower := msg(topic, "big", 1)
		others := interleaved(topic, 5, 2)
		msgs := append([]*sink.Message{big, follower}, others...)
		se := sendErr(t, s.Send(context.Background(), msgs))
		failed := checkFailures(t, msgs, se)
		if err, f := failed[0]; !f || !sink.IsPermanent(err) {
			t.Fatalf("oversized message: failed=%v err=%v, want a permanent failure", f, err)
		}
		if _, f := failed[1]; !f {
			t.Fatalf("message after the oversized one with the same key was reported acknowledged")
		}
		if len(failed) != 2 {
			t.Fatalf("%d failures, want only the 2 messages of the oversized key: %v", len(failed), se)
		}
		stored := h.Read(t, topic, len(others))
		for _, r := range stored {
			if bytes.Equal(r.Key, big.Key) && bytes.Equal(r.Value, big.Value) {
				t.Fatalf("oversized message was stored")
			}
		}
		got := byValue(stored)
		for _, m := range others {
			if len(got[string(m.Value)]) != 1 {
				t.Errorf("acknowledged message %q stored %d times", m.Value, len(got[string(m.Value)]))
			}
		}
	})
}

func testResendKeepsKeyOrder(t *testing.T, h Harness) {
	s := newSink(t, h)
	topic := h.Topic(t)
	const keys, perKey = 30, 10
	pending := interleaved(topic, keys, perKey)
	injected := 0
	for round := 0; len(pending) > 0; round++ {
		if round == 20 {
			t.Fatalf("%d messages still failing after 20 rounds", len(pending))
		}
		if round < 4 {
			h.FailNext(t, topic, true, 2)
			injected++
		}
		err := s.Send(context.Background(), pending)
		if err == nil {
			pending = nil
			continue
		}
		se := sendErr(t, err)
		failed := checkFailures(t, pending, se)
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) {
				t.Fatalf("transient injection gave a permanent failure: %v", f.Err)
			}
		}
		next := make([]*sink.Message, 0, len(failed))
		for i, m := range pending {
			if _, f := failed[i]; f {
				next = append(next, m)
			}
		}
		pending = next
	}
	if injected == 0 {
		t.Fatal("no failure injected")
	}
	checkKeyOrder(t, h.Read(t, topic, keys*perKey), keys, perKey, true)
}

func testCancel(t *testing.T, h Harness) {
	t.Run("WhileInFlight", func(t *testing.T) {
		s := newSink(t, h)
		topic := h.Topic(t)
		// Warm up connections and metadata so the hold catches the produce requests.
		if err := s.Send(context.Background(), []*sink.Message{msg(topic, "warm", 0)}); err != nil {
			t.Fatalf("warm-up Send: %v", err)
		}
		release := h.Hold(t, topic)
		defer release()
		msgs := interleaved(topic, 10, 2)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		err := s.Send(ctx, msgs)
		elapsed := time.Since(start)
		if elapsed > 2*time.Second {
			t.Errorf("Send returned %v after cancel, want promptly", elapsed-200*time.Millisecond)
		}
		if err == nil {
			t.Fatal("Send returned nil although the broker answered nothing")
		}
		se := sendErr(t, err)
		if len(se.Failures) != len(msgs) {
			t.Errorf("%d of %d unanswered messages reported failed", len(se.Failures), len(msgs))
		}
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) {
				t.Errorf("cancelled message %d is permanent: %v", f.Index, f.Err)
			}
		}
	})
	t.Run("AlreadyCancelled", func(t *testing.T) {
		s := newSink(t, h)
		topic := h.Topic(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		msgs := interleaved(topic, 3, 1)
		se := sendErr(t, s.Send(ctx, msgs))
		if len(se.Failures) != len(msgs) {
			t.Errorf("%d of %d messages failed with a cancelled ctx", len(se.Failures), len(msgs))
		}
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) || !errors.Is(f.Err, context.Canceled) {
				t.Errorf("message %d: %v, want a transient context.Canceled", f.Index, f.Err)
			}
		}
	})
}
