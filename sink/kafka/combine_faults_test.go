package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

// REVIEW: a batch-level permanent error (no per-record errors, as brokers before 2.4 / produce
// v<8 answer, or RECORD_LIST_TOO_LARGE) on a record batch merged from two Sends must not make
// the innocent Send's messages permanent (poison: dead-lettered or stopping the run).
func TestMergedPermanentErrorSparesOtherSend(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	release := e.hold(t, topic, false)
	const codeInvalidTimestamp int16 = 32
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == forwardedMarker || !hasTopic(req, topic, -1) {
			return nil, nil, false
		}
		e.c.KeepControl()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				if bytes.Contains(p.Records, []byte("bad-key")) {
					// The broker refuses the whole batch for the bad record's timestamp.
					return e.partialFailure(req, codeInvalidTimestamp, func(string, int32) bool { return true }), nil, true
				}
			}
		}
		return nil, nil, false
	})
	var wg sync.WaitGroup
	for g := range maxRequestsPerBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Send(context.Background(), keyed(topic, 1, func(int) string { return "held-" + string(rune('a'+g)) }))
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); inflight(s) < maxRequestsPerBroker; {
		if time.Now().After(deadline) {
			t.Fatalf("%d in flight", inflight(s))
		}
		time.Sleep(time.Millisecond)
	}
	var badErr, goodErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		badErr = s.Send(context.Background(), keyed(topic, 1, func(int) string { return "bad-key" }))
	}()
	for deadline := time.Now().Add(5 * time.Second); pendingReqs(s) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("bad send not pending")
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		defer wg.Done()
		goodErr = s.Send(context.Background(), keyed(topic, 1, func(int) string { return "good-key" }))
	}()
	for deadline := time.Now().Add(5 * time.Second); pendingReqs(s) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("good send not pending")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	if badErr == nil || !sink.IsPermanent(sendError(t, badErr).Failures[0].Err) {
		t.Errorf("bad send: %v, want a permanent failure", badErr)
	}
	if goodErr != nil {
		var se *sink.SendError
		if errors.As(goodErr, &se) && sink.IsPermanent(se.Failures[0].Err) {
			t.Errorf("the innocent Send merged with the bad one got a permanent verdict (poison): %v", goodErr)
		}
	}
}

// REVIEW: the topic cache must never go back to an older layout. Two Sends resolve at once:
// X fetched at t0 (the old layout, 4 partitions), Y at t1 > t0 (8 partitions, after the
// transport's periodic refresh). Y stores first, X second: the cache now serves the old layout
// for the rest of the second, so a key that went to its new partition goes back to the old one.
func TestTopicCacheNeverGoesBack(t *testing.T) {
	var c topicCache
	t0 := time.Now()
	t1 := t0.Add(time.Millisecond)
	c.put(map[string]topicInfo{"a": {partitions: []int{0, 1, 2, 3, 4, 5, 6, 7}}}, t1)
	c.put(map[string]topicInfo{"a": {partitions: []int{0, 1, 2, 3}}}, t0) // the slower, older fetch
	got, ok := c.get([]string{"a"}, t1.Add(time.Millisecond))
	if ok && len(got["a"].partitions) != 8 {
		t.Errorf("cache went back to an older layout: %d partitions after 8 were cached", len(got["a"].partitions))
	}
}

// REVIEW: when every pending batch of a broker belongs to Sends that gave up, kick still starts
// a request: take returns no groups and send writes an empty produce request (no topics) to
// some broker, holding one of the 4 slots.
func TestNoEmptyRequestWhenAllPendingGone(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	var empty atomic.Int64
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.c.KeepControl()
		if len(kreq.(*kmsg.ProduceRequest).Topics) == 0 {
			empty.Add(1)
		}
		return nil, nil, false
	})
	release := e.hold(t, topic, false)
	var wg sync.WaitGroup
	for g := range maxRequestsPerBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Send(context.Background(), keyed(topic, 1, func(int) string { return "held-" + string(rune('a'+g)) }))
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); inflight(s) < maxRequestsPerBroker; {
		if time.Now().After(deadline) {
			t.Fatalf("%d in flight", inflight(s))
		}
		time.Sleep(time.Millisecond)
	}
	// The window between a Send's ctx ending and its withdraw: its batch is still pending, gone.
	gone := make(chan struct{})
	close(gone)
	msgs := keyed(topic, 1, func(int) string { return "late" })
	r := &batchReq{topic: topic, partition: 0, leader: s.combine.onlyLeader(t), msgs: msgs, idx: []int{0},
		size: batchBytes(msgs, []int{0}), gone: gone, done: make(chan batchResult, 1)}
	s.combine.submit([]*batchReq{r})
	release()
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	if n := empty.Load(); n > 0 {
		t.Errorf("%d empty produce requests sent", n)
	}
}

func (c *combiner) onlyLeader(t *testing.T) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.brokers {
		return id
	}
	t.Fatal("no broker queue")
	return -1
}

// REVIEW: the combiner under random partition failures, each sender resending its failures in
// order as the pipeline does: every key's messages are stored in order, none lost, none twice
// (the injected failure stores nothing).
func TestCombinerOrderUnderRandomFailures(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	const parts = 4
	topic := e.topic(t, parts)
	var mu sync.Mutex
	var injected atomic.Int64
	rnd := uint64(12345)
	next := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		rnd = rnd*6364136223846793005 + 1442695040888963407
		return rnd >> 33
	}
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == forwardedMarker || !hasTopic(req, topic, -1) {
			return nil, nil, false
		}
		e.c.KeepControl()
		if next()%2 == 0 {
			return nil, nil, false
		}
		injected.Add(1)
		return e.partialFailure(req, codeNotEnoughReplicas, func(string, int32) bool { return next()%3 == 0 }), nil, true
	})
	defer func() { t.Logf("%d requests with injected failures", injected.Load()) }()
	const senders, rounds, perSend = 12, 15, 10
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				msgs := make([]*sink.Message, perSend)
				for i := range msgs {
					msgs[i] = &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("s%d-k%d", g, i%4)),
						Value: []byte(fmt.Sprintf("s%d-k%d-%d", g, i%4, r*perSend+i))}
				}
				for attempt := 0; len(msgs) > 0; attempt++ {
					if attempt > 200 {
						t.Errorf("sender %d: never acknowledged", g)
						return
					}
					err := s.Send(context.Background(), msgs)
					if err == nil {
						break
					}
					var se *sink.SendError
					if !errors.As(err, &se) {
						t.Errorf("sender %d: %v", g, err)
						return
					}
					retry := make([]*sink.Message, 0, len(se.Failures))
					for _, f := range se.Failures {
						if sink.IsPermanent(f.Err) {
							t.Errorf("sender %d: permanent: %v", g, f.Err)
						}
						retry = append(retry, msgs[f.Index])
					}
					msgs = retry
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	const total = senders * rounds * perSend
	got := e.read(t, topic, total)
	if len(got) != total {
		t.Errorf("stored %d, want %d", len(got), total)
	}
	last := map[string]int{}
	seen := map[string]bool{}
	for _, r := range got {
		v := string(r.Value)
		if seen[v] {
			t.Errorf("%s stored twice", v)
		}
		seen[v] = true
		seq, _ := strconv.Atoi(v[strings.LastIndex(v, "-")+1:])
		if prev, ok := last[string(r.Key)]; ok && seq <= prev {
			t.Errorf("key %s: %d stored after %d", r.Key, seq, prev)
		}
		last[string(r.Key)] = seq
	}
}

// REVIEW: leaders move while Sends run (3 brokers, stale topic cache and transport layout): the
// combiner's per-leader grouping may disagree with the transport's; everything must still arrive,
// each key in order.
func TestLeaderMovesMidFlight(t *testing.T) {
	e := newEnv(t, kfake.NumBrokers(3))
	s := e.sink(t, nil)
	const parts = 6
	topic := e.topic(t, parts)
	stop := make(chan struct{})
	moved := make(chan int)
	go func() {
		n := 0
		defer func() { moved <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			if err := e.c.MoveTopicPartition(topic, int32(i%parts), int32(i%3)); err == nil {
				n++
			}
		}
	}()
	var failures atomic.Int64
	const senders, rounds, perSend = 8, 60, 12
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				time.Sleep(4 * time.Millisecond)
				msgs := make([]*sink.Message, perSend)
				for i := range msgs {
					msgs[i] = &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("s%d-k%d", g, i%6)),
						Value: []byte(fmt.Sprintf("s%d-k%d-%d", g, i%6, r*perSend+i))}
				}
				for attempt := 0; len(msgs) > 0; attempt++ {
					if attempt > 500 {
						t.Errorf("sender %d: never acknowledged", g)
						return
					}
					err := s.Send(context.Background(), msgs)
					if err == nil {
						break
					}
					var se *sink.SendError
					if !errors.As(err, &se) {
						t.Errorf("sender %d: %v", g, err)
						return
					}
					failures.Add(int64(len(se.Failures)))
					retry := make([]*sink.Message, 0, len(se.Failures))
					for _, f := range se.Failures {
						if sink.IsPermanent(f.Err) {
							t.Errorf("sender %d: permanent: %v", g, f.Err)
						}
						retry = append(retry, msgs[f.Index])
					}
					msgs = retry
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	t.Logf("%d moves, %d failed messages resent", <-moved, failures.Load())
	const total = senders * rounds * perSend
	got := e.read(t, topic, total)
	last := map[string]int{}
	seen := map[string]bool{}
	for _, r := range got {
		v := string(r.Value)
		seq, _ := strconv.Atoi(v[strings.LastIndex(v, "-")+1:])
		if !seen[v] {
			if prev, ok := last[string(r.Key)]; ok && seq <= prev {
				t.Errorf("key %s: %d first stored after %d", r.Key, seq, prev)
			}
			last[string(r.Key)] = seq
		}
		seen[v] = true
	}
	if len(seen) != total {
		t.Errorf("stored %d distinct, want %d", len(seen), total)
	}
}

// REVIEW: RECORD_LIST_TOO_LARGE (18: the batch is larger than the topic's segment.bytes) is a
// batch-level refusal without per-record errors, like MESSAGE_TOO_LARGE: a batch merged from
// several Sends may be refused where each Send's own batch fits. Each Send must resend its batch
// alone rather than fail its messages permanently (poison).
func TestMergedRecordListTooLargeIsResentAlone(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	release := e.hold(t, topic, false)
	const codeRecordListTooLarge int16 = 18
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == forwardedMarker || !hasTopic(req, topic, -1) {
			return nil, nil, false
		}
		e.c.KeepControl()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil && b.NumRecords > 1 {
					return e.partialFailure(req, codeRecordListTooLarge, func(string, int32) bool { return true }), nil, true
				}
			}
		}
		return nil, nil, false
	})
	const senders = 8
	var wg sync.WaitGroup
	errs := make([]error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = s.Send(context.Background(), keyed(topic, 1, func(i int) string { return fmt.Sprintf("g%d-%d", g, i) }))
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); pendingReqs(s) < senders-maxRequestsPerBroker; {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches pending", pendingReqs(s))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("sender %d (one record, fits alone): %v", g, err)
		}
	}
}
