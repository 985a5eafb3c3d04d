package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxd/outboxd/sink"
)

// An explicit partition (tables[].columns.partition) places the record there whatever its key;
// one the topic lacks fails permanently, and so does every later message with its key, while
// other messages go out. A nil value is a null record value (a tombstone), an empty one is not.
func TestExplicitPartitionAndNullValue(t *testing.T) {
	e := newEnv(t)
	s := e.sink(t, nil)
	topic := e.topic(t, 3)
	msgs := []*sink.Message{
		{Topic: topic, Key: []byte("a"), Value: []byte("to 2"), Partition: 2, HasPartition: true},
		{Topic: topic, Key: []byte("a"), Value: []byte("to 0"), Partition: 0, HasPartition: true},
		{Topic: topic, Key: []byte("b"), Value: nil},
		{Topic: topic, Key: []byte("c"), Value: []byte{}},
		{Topic: topic, Key: []byte("d"), Value: []byte("out of range"), Partition: 3, HasPartition: true},
		{Topic: topic, Key: []byte("d"), Value: []byte("after it")},
	}
	se := sendError(t, s.Send(context.Background(), msgs))
	if len(se.Failures) != 2 || se.Failures[0].Index != 4 || se.Failures[1].Index != 5 {
		t.Fatalf("failures %+v, want messages 4 and 5", se.Failures)
	}
	if err := se.Failures[0].Err; !sink.IsPermanent(err) || !errors.Is(err, errBadPartition) {
		t.Fatalf("out-of-range partition: %v, want permanent errBadPartition", err)
	}
	if sink.IsPermanent(se.Failures[1].Err) {
		t.Fatalf("the follower is held back, not permanent: %v", se.Failures[1].Err)
	}
	got := map[string]struct {
		part  int
		null  bool
		empty bool
	}{}
	for _, r := range e.read(t, topic, 4) {
		got[string(r.Key)+"/"+string(r.Value)] = struct {
			part  int
			null  bool
			empty bool
		}{r.Queue, r.Value == nil, r.Value != nil && len(r.Value) == 0}
	}
	if g := got["a/to 2"]; g.part != 2 {
		t.Errorf("a/to 2 in partition %d", g.part)
	}
	if g := got["a/to 0"]; g.part != 0 {
		t.Errorf("a/to 0 in partition %d", g.part)
	}
	if g, ok := got["b/"]; !ok || !g.null {
		t.Errorf("b: %+v (present %v), want a null value", g, ok)
	}
	if g, ok := got["c/"]; !ok || g.null {
		t.Errorf("c: %+v (present %v), want an empty, non-null value", g, ok)
	}
	if len(got) != 4 {
		t.Errorf("stored %v", got)
	}
}
