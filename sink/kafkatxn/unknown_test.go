package kafkatxn

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

// TestUnknownCommitOutcome: a commit answered UNKNOWN_SERVER_ERROR (kfake rejects it before
// acting) leaves its outcome unknown to the client: Save fails retryably, and the next Save
// finds out it did not land (ErrTxnAborted, nothing visible); the session goes on.
func TestUnknownCommitOutcome(t *testing.T) {
	c := cluster(t)
	var n counters
	s := open(t, options(c.ListenAddrs(), &n))
	ctx := testCtx(t)
	if err := s.Save(ctx, cp(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError})
	err := s.Save(ctx, cp(t, 2))
	if err == nil || errors.Is(err, sink.ErrTxnAborted) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Save with the commit's answer lost: %v, want a retryable error", err)
	}
	if err := s.Send(ctx, msgs("b", 0, 1)); err == nil {
		t.Fatal("Send while the commit's outcome is unknown succeeded")
	}
	err = s.Save(ctx, cp(t, 2))
	if !errors.Is(err, sink.ErrTxnAborted) {
		t.Fatalf("Save again: %v, want ErrTxnAborted (the commit did not land)", err)
	}
	if got := load(t, s); got == nil || got.GTIDSet != "0-1-1" {
		t.Fatalf("Load = %+v, want 0-1-1", got)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 0 {
		t.Fatalf("read_committed sees %v", vs)
	}
	if err := s.Send(ctx, msgs("c", 0, 1)); err != nil {
		t.Fatalf("Send after resolving: %v", err)
	}
	if err := s.Save(ctx, cp(t, 3)); err != nil {
		t.Fatalf("Save after resolving: %v", err)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 1 || !vs["c-0"] {
		t.Fatalf("read_committed sees %v, want c-0", vs)
	}
	if n.fenced.Load() != 0 {
		t.Fatal("resolving fenced the session")
	}
}

// TestUnknownCommitOutcomeThatLanded: the next Save after an unknown outcome whose commit did
// land returns nil for the same checkpoint, and ErrTxnAborted for another. kfake cannot apply a
// commit and lose its answer (a faulted EndTxn is never applied), so the test commits normally
// and then puts the session in the state such a lost answer leaves.
func TestUnknownCommitOutcomeThatLanded(t *testing.T) {
	c := cluster(t)
	s := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	if err := s.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatal(err)
	}
	landed, err := s.loadRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.unknown = landed
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatalf("Save again of the checkpoint that landed: %v", err)
	}
	s.unknown = landed
	if err := s.Save(ctx, cp(t, 3)); !errors.Is(err, sink.ErrTxnAborted) {
		t.Fatalf("Save of another checkpoint after one that landed: %v, want ErrTxnAborted", err)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 2 {
		t.Fatalf("read_committed sees %v, want a-0 and a-1", vs)
	}
}
