package sink

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestFanOutRunsEachOnceWithinTheLimit(t *testing.T) {
	for _, n := range []int{1, 2, 7} {
		var ran [7]atomic.Int32
		var now, most atomic.Int32
		FanOut(context.Background(), n, 2, func(i int) {
			c := now.Add(1)
			for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			now.Add(-1)
			ran[i].Add(1)
		}, func(i int) { t.Errorf("n=%d: task %d cancelled with ctx alive", n, i) })
		for i := range n {
			if got := ran[i].Load(); got != 1 {
				t.Errorf("n=%d: task %d ran %d times", n, i, got)
			}
		}
		if most.Load() > 2 {
			t.Errorf("n=%d: %d tasks at once, limit 2", n, most.Load())
		}
	}
}

func TestFanOutCancelledTasksDoNotRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, n := range []int{1, 3} {
		var mu sync.Mutex
		var cancelled []int
		FanOut(ctx, n, 1, func(i int) {
			// With several tasks the select may pick the free slot over ctx; one task never runs.
			if n == 1 {
				t.Errorf("the only task ran after ctx ended")
			}
		}, func(i int) {
			mu.Lock()
			cancelled = append(cancelled, i)
			mu.Unlock()
		})
		if n == 1 && len(cancelled) != 1 {
			t.Errorf("n=1: cancelled %v, want [0]", cancelled)
		}
	}
}
