package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker's Produce hook finds the event_id of every record a real client sends, in batches of
// several records, and leaves the request to kfake (the records are stored).
func TestBrokerStampsSeeEveryProducedRecord(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var st brokerStamps
	st.hook(c)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := 0; i < 50; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(bizKey(i)), Value: []byte(payload(i)),
			Headers: []kgo.RecordHeader{{Key: "other", Value: []byte("x")}, {Key: "event_id", Value: []byte(eventID("p-", 0, i))}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v (the hook must not take the request from kfake)", err)
	}
	st.mu.Lock()
	lines := append([]string(nil), st.lines...)
	st.mu.Unlock()
	seen := map[int]bool{}
	for _, l := range lines {
		id, ns, ok := strings.Cut(l, " ")
		w, i, okID := parseEventID("p-", id)
		if !ok || !okID || w != 0 || ns == "" {
			t.Fatalf("stamp line %q", l)
		}
		seen[i] = true
	}
	if len(seen) != 50 {
		t.Fatalf("stamped %d of 50 records: %v", len(seen), lines)
	}
}

func TestBreakdownSplitsThePath(t *testing.T) {
	tr := newTracker(100) // the slowest 1%: one message
	tap := make([]atomic.Int64, 100)
	broker := make([]int64, 100)
	ms := int64(time.Millisecond)
	tr.start.Store(1)
	for i := 0; i < 100; i++ {
		due := 1 + int64(i)*ms // rate 1000/s
		tr.sent[i].Store(due + ms)
		tr.commit[i].Store(due + 2*ms)
		tap[i].Store(due + 2*ms - ms/2) // the binlog before COMMIT returned
		slow := int64(0)
		if i == 7 {
			slow = 50 * ms // the one slow message is slow in the relay
		}
		broker[i] = due + 3*ms + slow
		tr.recv[i].Store(due + 4*ms + slow)
	}
	segs := breakdown(tr, tap, broker, 1000)
	want := []struct {
		p50, slow float64
	}{{1, 1}, {1, 1}, {-0.5, -0.5}, {1.5, 51.5}, {1, 1}, {2, 52}}
	if len(segs) != len(want) {
		t.Fatalf("%d segments: %+v", len(segs), segs)
	}
	for k, w := range want {
		if d := segs[k].P50MS - w.p50; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: p50 %v, want %v", segs[k].Name, segs[k].P50MS, w.p50)
		}
		if d := segs[k].SlowMeanMS - w.slow; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: slowest-1%% mean %v, want %v", segs[k].Name, segs[k].SlowMeanMS, w.slow)
		}
	}
}

func TestFloorRatiosAndTargets(t *testing.T) {
	r := &Results{Params: Params{TxnSizes: []int{1, 100}, Steady1Rates: []int{3000}}}
	add := func(id string, eps, cpu float64, p99 float64) {
		w := Workload{ID: id, EventsPerSec: fp(eps), CPUPer100k: fp(cpu)}
		if p99 > 0 {
			w.Latency = &LatencyStats{P99MS: p99}
		}
		r.Workloads = append(r.Workloads, w)
	}
	add("catchup-kafka-txn1", 90, 1.4, 0)
	add("floor-franz-go-txn1", 100, 1.0, 0)
	add("catchup-rocketmq-txn1", 70, 5, 0)
	add("catchup-kafka-txn100", 200, 0.5, 0)
	add("floor-franz-go-txn100", 200, 0.45, 0)
	add(fastCkptID, 180, 0.55, 0)
	add("steady1-outboxd-kafka-3000", 3000, 0, 6)
	add("steady1-floor-franz-go-3000", 3000, 0, 3)
	r.computeRatios()
	get := func(name string) float64 {
		v := r.ratioValue(name)
		if v == nil {
			t.Fatalf("no ratio %q in %+v", name, r.Ratios)
		}
		return *v
	}
	if v := get("outboxd / floor (franz-go), catch-up events/s, 1-row txns"); v != 0.9 {
		t.Errorf("events/s ratio %v", v)
	}
	if v := get("outboxd / floor (franz-go), CPU s per 100k events, 1-row txns"); v < 1.39 || v > 1.41 {
		t.Errorf("CPU ratio %v", v)
	}
	if v := get("outboxd → RocketMQ / outboxd → Kafka, catch-up events/s, 1-row txns"); v < 0.77 || v > 0.78 {
		t.Errorf("RocketMQ ratio %v", v)
	}
	if v := get(fastCkptEPS); v != 0.9 {
		t.Errorf("checkpoint interval ratio %v", v)
	}
	if r.ratioValue("outboxd / floor (kafka-go), catch-up events/s, 1-row txns") != nil {
		t.Error("a ratio for a floor that did not run")
	}
	wantTargets(t, r,
		"| Kafka catch-up ≥ 0.85 × floor (franz-go) events/s, 1-row txns | 0.90 | yes |",
		"| Kafka catch-up ≤ 1.2 × floor (franz-go) CPU per event, 1-row txns | 1.40× | **no** |",
		"| Kafka catch-up ≤ 1.2 × floor (franz-go) CPU per event, 100-row txns | 1.11× | yes |",
		"| Catch-up with checkpoint.interval 100ms ≥ 0.95 × with 1s, events/s, 100-row txns | 0.90 | **no** |",
		"| RocketMQ catch-up ≥ 0.7 × outboxd's Kafka catch-up, 1-row txns | 0.78 | yes |",
		"| Steady 3000/s from one connection: p99 ≤ 1.5 × the floor's | 2.00× | **no** |",
	)
}
