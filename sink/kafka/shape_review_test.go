package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
)

// A partition added to a topic is named by a row a moment later, while the sink's cached
// metadata still shows the old count: that is a transient cause, so the sink must look again
// before it calls the partition out of range (permanent, on_poison).
func TestExplicitPartitionAddedToTopic(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	ctx := context.Background()
	if err := s.Send(ctx, []*sink.Message{{Topic: topic, Key: []byte("a"), Value: []byte("warm"), Partition: 0, HasPartition: true}}); err != nil {
		t.Fatalf("warming the metadata cache: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.adm.CreatePartitions(cctx, 2, topic); err != nil {
		t.Fatalf("adding partitions: %v", err)
	}
	msgs := []*sink.Message{
		{Topic: topic, Key: []byte("a"), Value: []byte("new partition"), Partition: 2, HasPartition: true},
		{Topic: topic, Key: []byte("a"), Value: []byte("after it")},
	}
	if err := s.Send(ctx, msgs); err != nil {
		t.Fatalf("a partition the topic has had since before the Send: %v", err)
	}
	for _, r := range e.read(t, topic, 3) {
		if string(r.Value) == "new partition" && r.Queue != 2 {
			t.Errorf("record in partition %d, want 2", r.Queue)
		}
	}
	// Still permanent for a partition the topic really lacks, after a fresh look.
	se := sendError(t, s.Send(ctx, []*sink.Message{{Topic: topic, Key: []byte("b"), Value: []byte("x"), Partition: 3, HasPartition: true}}))
	if len(se.Failures) != 1 || !sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("partition 3 of 3: %+v, want one permanent failure", se.Failures)
	}
}

// Records of one batch with different record times in no order (columns.timestamp): the
// batch header's first timestamp is the first record's, its max timestamp the largest, and
// each record's delta (negative ones too) gives its own time back to a franz-go consumer.
func TestRecordTimesInOneBatchOutOfOrder(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 1)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	times := []time.Time{
		base.Add(5 * time.Second), base, base.Add(10*time.Second + 7*time.Millisecond),
		base.Add(-3 * time.Hour), time.UnixMilli(1), base.Add(10 * time.Second),
	}
	type hdr struct{ first, max int64 }
	var seen []hdr
	var mu sync.Mutex
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range kreq.(*kmsg.ProduceRequest).Topics {
			if tp.Topic != topic {
				continue
			}
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil {
					mu.Lock()
					seen = append(seen, hdr{b.FirstTimestamp, b.MaxTimestamp})
					mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	msgs := make([]*sink.Message, len(times))
	for i, tm := range times {
		msgs[i] = &sink.Message{Topic: topic, Key: []byte("k"), Value: []byte(fmt.Sprint(i)), Time: tm}
	}
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].first != times[0].UnixMilli() || seen[0].max != times[2].UnixMilli() {
		t.Errorf("batch headers %+v, want one batch with first %d and max %d", seen, times[0].UnixMilli(), times[2].UnixMilli())
	}
	mu.Unlock()
	got := e.read(t, topic, len(times))
	for i, r := range got {
		if want := times[i]; !r.Time.Equal(want) || string(r.Value) != fmt.Sprint(i) {
			t.Errorf("record %d (%s): time %v, want %v", i, r.Value, r.Time.UTC(), want)
		}
	}
}

// Rows of one key in different partitions of a topic (columns.partition): a later one is
// not sent before the earlier one is acknowledged, so when the earlier one fails the later one
// is really "not sent", the resend stores it once, and no consumer sees it first.
func TestExplicitPartitionsOfOneKeyInOrder(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 3)
	e.failProduce(topic, 2, codeNotEnoughReplicas, 1)
	msgs := []*sink.Message{
		{Topic: topic, Key: []byte("a"), Value: []byte("first, to 2"), Partition: 2, HasPartition: true},
		{Topic: topic, Key: []byte("a"), Value: []byte("second, to 0"), Partition: 0, HasPartition: true},
		{Topic: topic, Key: []byte("a"), Value: []byte("third, by key")},
		{Topic: topic, Key: []byte("b"), Value: []byte("other key, to 0"), Partition: 0, HasPartition: true},
	}
	se := sendError(t, s.Send(context.Background(), msgs))
	if len(se.Failures) != 3 {
		t.Fatalf("failures %+v, want the three messages of key a", se.Failures)
	}
	for _, f := range se.Failures {
		if sink.IsPermanent(f.Err) {
			t.Fatalf("message %d: %v, want transient", f.Index, f.Err)
		}
	}
	if got := e.read(t, topic, 1); len(got) != 1 || string(got[0].Value) != "other key, to 0" {
		t.Fatalf("stored after the failed Send: %v, want only key b's message", values(got))
	}
	if err := s.Send(context.Background(), msgs[:3]); err != nil {
		t.Fatalf("resend: %v", err)
	}
	if got := e.read(t, topic, 4); len(got) != 4 {
		t.Fatalf("stored %v, want each message once", values(got))
	}
}

func values(rs []sinktest.Received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d:%s", r.Queue, r.Value)
	}
	return out
}

// Randomized: keys spread over explicit partitions and their hash partition, one partition's
// batch failing now and then; the caller resends what failed, in order, until all is
// acknowledged. Every message is stored exactly once (a failed one was not stored), and each
// key's messages keep slice order in every partition.
func TestPropertyExplicitPartitionsResend(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 3)
	rng := rand.New(rand.NewPCG(14, 2026))
	var all []*sink.Message
	for round := 0; round < 8; round++ {
		var pending []*sink.Message
		for i := 0; i < 12; i++ {
			m := &sink.Message{Topic: topic, Key: []byte{byte('a' + rng.IntN(3))}, Value: []byte(fmt.Sprintf("r%d-%d", round, i))}
			if rng.IntN(3) > 0 {
				m.Partition, m.HasPartition = int32(rng.IntN(3)), true
			}
			pending = append(pending, m)
		}
		all = append(all, pending...)
		for try := 0; len(pending) > 0; try++ {
			if try > 20 {
				t.Fatalf("round %d: still failing after 20 resends", round)
			}
			if rng.IntN(2) == 0 {
				e.failProduce(topic, int32(rng.IntN(3)), codeNotEnoughReplicas, 1)
			}
			err := s.Send(context.Background(), pending)
			if err == nil {
				break
			}
			se := sendError(t, err)
			var again []*sink.Message
			for _, f := range se.Failures {
				if sink.IsPermanent(f.Err) {
					t.Fatalf("message %s: %v", pending[f.Index].Value, f.Err)
				}
				again = append(again, pending[f.Index])
			}
			pending = again
		}
	}
	got := e.read(t, topic, len(all))
	if len(got) != len(all) {
		t.Fatalf("stored %d records, want %d (each once)", len(got), len(all))
	}
	pos := map[string]int{}
	for i, m := range all {
		pos[string(m.Value)] = i
	}
	last := map[string]int{} // "key/partition" -> slice index of the last record read
	seen := map[string]bool{}
	for _, r := range got {
		v := string(r.Value)
		if seen[v] {
			t.Fatalf("%s stored twice", v)
		}
		seen[v] = true
		m := all[pos[v]]
		if m.HasPartition && int32(r.Queue) != m.Partition {
			t.Errorf("%s in partition %d, want %d", v, r.Queue, m.Partition)
		}
		k := fmt.Sprintf("%s/%d", r.Key, r.Queue)
		if p, ok := last[k]; ok && p > pos[v] {
			t.Errorf("key %s in partition %d: %s after %s", r.Key, r.Queue, v, all[p].Value)
		}
		last[k] = pos[v]
	}
}
