package pipeline

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/outboxd/outboxd/sink"
)

// emptyErrSink's first Send fails with a SendError that lists no failure; later ones store.
type emptyErrSink struct {
	memSink
	calls atomic.Int64
}

func (s *emptyErrSink) Send(ctx context.Context, msgs []*sink.Message) error {
	if s.calls.Add(1) == 1 {
		return &sink.SendError{}
	}
	return s.memSink.Send(ctx, msgs)
}

// A Send that returned an error has proven nothing, even when the SendError lists no failed
// message: its messages are resent, not counted as acknowledged.
func TestSendErrorWithoutFailuresAcknowledgesNothing(t *testing.T) {
	s, saver := &emptyErrSink{}, &memSaver{}
	p := newTestPipeline(t, s, saver, "")
	if err := runAll(t, p, txn(1, "a:1")); err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(&s.memSink); got != "t/1" {
		t.Fatalf("stored %q after a failed Send, want t/1 (resent)", got)
	}
	if got := saver.last(); got != "0-1-1" {
		t.Fatalf("checkpoint %q", got)
	}
}
