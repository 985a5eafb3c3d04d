package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

// Sends running at once share produce requests (at most maxRequestsPerBroker in flight, the
// rest merged into the next), and every key's messages are still stored in send order, each
// exactly once.
func TestConcurrentSendsShareRequests(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 6)
	n := e.countProduce(topic)
	const senders, rounds, perSend = 16, 20, 8
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				msgs := make([]*sink.Message, perSend)
				for i := range msgs {
					// Keys of one sender only, as the pipeline's lanes have them.
					msgs[i] = &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("s%d-k%d", g, i%3)),
						Value: []byte(fmt.Sprintf("s%d-k%d-%d", g, i%3, r*perSend+i))}
				}
				if err := s.Send(context.Background(), msgs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
	const total = senders * rounds * perSend
	got := e.read(t, topic, total)
	if len(got) != total {
		t.Fatalf("stored %d, want %d", len(got), total)
	}
	last := map[string]int{}
	for _, r := range got {
		v := string(r.Value)
		seq, _ := strconv.Atoi(v[strings.LastIndex(v, "-")+1:])
		if prev, ok := last[string(r.Key)]; ok && seq <= prev {
			t.Errorf("key %s: %d stored after %d", r.Key, seq, prev)
		}
		last[string(r.Key)] = seq
	}
	if reqs := n.Load(); reqs >= senders*rounds {
		t.Errorf("%d produce requests for %d Sends: concurrent Sends did not share any", reqs, senders*rounds)
	} else {
		t.Logf("%d produce requests for %d Sends", reqs, senders*rounds)
	}
}

// A partition's record batch merged from several Sends that the broker refuses as too large is
// resent by each Send on its own, not failed as permanently too large.
func TestMergedBatchTooLargeIsResentAlone(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	// The first requests wait at the broker, so the later Sends' batches queue up and merge.
	release := e.hold(t, topic, false)
	// The broker refuses every record batch of more than one record (one Send's own) as too large:
	// a message alone must not be failed as too large because it was merged with others.
	var refused atomic.Int64
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == forwardedMarker || !hasTopic(req, topic, -1) {
			return nil, nil, false
		}
		e.c.KeepControl()
		big := false
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil && b.NumRecords > 1 {
					big = true
				}
			}
		}
		if !big {
			return nil, nil, false
		}
		refused.Add(1)
		return e.partialFailure(req, codeMessageTooLarge, func(string, int32) bool { return true }), nil, true
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
			t.Fatalf("%d batches pending, want %d", pendingReqs(s), senders-maxRequestsPerBroker)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("sender %d: %v", g, err)
		}
	}
	if refused.Load() == 0 {
		t.Error("no merged batch was refused: the test did not merge")
	}
	if got := e.read(t, topic, senders); len(got) != senders {
		t.Errorf("stored %d, want %d", len(got), senders)
	}
}

// pendingReqs counts the batches waiting in s's combiner.
func pendingReqs(s *Sink) int {
	s.combine.mu.Lock()
	defer s.combine.mu.Unlock()
	n := 0
	for _, q := range s.combine.brokers {
		n += len(q.pending)
	}
	return n
}

// A Send that gives up while its batches still wait for a request slot leaves nothing behind:
// they are never written (a fenced leader's sends must end within the request timeout).
func TestCancelledSendWritesNothingLater(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	release := e.hold(t, topic, false)
	var wg sync.WaitGroup
	for g := range maxRequestsPerBroker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Send(context.Background(), keyed(topic, 1, func(int) string { return fmt.Sprintf("held-%d", g) })); err != nil {
				t.Errorf("held send %d: %v", g, err)
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); inflight(s) < maxRequestsPerBroker; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d", inflight(s), maxRequestsPerBroker)
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Send(ctx, keyed(topic, 2, func(int) string { return "late" })) }()
	for deadline := time.Now().Add(5 * time.Second); pendingReqs(s) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the late Send's batch never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled Send reported success")
	}
	release()
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // a late write would have landed by now
	got := e.read(t, topic, maxRequestsPerBroker)
	for _, r := range got {
		if string(r.Key) == "late" {
			t.Errorf("the cancelled Send's message %q was stored after it returned", r.Value)
		}
	}
	if len(got) != maxRequestsPerBroker {
		t.Errorf("stored %d, want the %d held sends' messages", len(got), maxRequestsPerBroker)
	}
}

// inflight counts the requests in flight in s's combiner.
func inflight(s *Sink) int {
	s.combine.mu.Lock()
	defer s.combine.mu.Unlock()
	n := 0
	for _, q := range s.combine.brokers {
		n += q.inflight
	}
	return n
}
