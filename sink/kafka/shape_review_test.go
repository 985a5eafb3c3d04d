package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
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
