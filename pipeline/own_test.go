package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
)

// outboxd's own checkpoint saves read back fold into the set but are no reason to save again:
// an idle server with the mysql store gets one save after real progress, not one per interval.
// The final save still writes everything, own saves included.
func TestOwnCheckpointTransactionsDoNotTriggerSaves(t *testing.T) {
	saver := &memSaver{}
	p := saveTestPipeline(t, saver, "0-1-1", time.Minute, nil)
	in := make(chan *binlog.Txn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()

	waitSaves := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			saver.mu.Lock()
			got := len(saver.saves)
			saver.mu.Unlock()
			if got >= n || time.Now().After(deadline) {
				if got != n {
					t.Fatalf("%d saves, want %d: %+v", got, n, saver.saves)
				}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	in <- txn(2, "k:1")
	waitSaves(1)
	if got := saver.last(); got != "0-1-2" {
		t.Fatalf("saved %q, want 0-1-2", got)
	}
	for seq := 3; seq <= 6; seq++ { // each save read back
		own := txn(seq)
		own.OnlyCheckpoint = true
		in <- own
	}
	time.Sleep(100 * time.Millisecond) // ten intervals of 10ms
	waitSaves(1)
	if got := p.Acked().String(); got != "0-1-6" {
		t.Fatalf("acked %q, want the own saves folded in (0-1-6)", got)
	}
	in <- txn(7) // a business transaction without outbox rows is progress
	waitSaves(2)
	if got := saver.last(); got != "0-1-7" {
		t.Fatalf("saved %q, want 0-1-7", got)
	}
	own := txn(8)
	own.OnlyCheckpoint = true
	in <- own
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitSaves(3)
	if got := saver.last(); got != "0-1-8" {
		t.Fatalf("final save %q, want 0-1-8 (the stop saves own progress too)", got)
	}
}
