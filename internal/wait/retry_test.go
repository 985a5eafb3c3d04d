package wait

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// sleeps records the waits instead of sleeping; it ends ctx (via cancel) at the wait with
// index endAt (-1: never).
type sleeps struct {
	got    []time.Duration
	endAt  int
	cancel context.CancelFunc
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) bool {
	s.got = append(s.got, d)
	if len(s.got)-1 == s.endAt {
		s.cancel()
	}
	return ctx.Err() == nil
}

var errAway = errors.New("writer away")

func TestRetryBackoffGrowsToItsCap(t *testing.T) {
	s := &sleeps{endAt: -1}
	var logged []time.Duration
	tries := 0
	r := Retry{
		Backoff: Backoff{Initial: time.Second, Max: 10 * time.Second, Sleep: s.sleep},
		OnRetry: func(err error, in time.Duration) {
			if !errors.Is(err, errAway) {
				t.Errorf("OnRetry got %v, want the try's error", err)
			}
			logged = append(logged, in)
		},
	}
	err := r.Do(context.Background(), func() error {
		if tries++; tries < 7 {
			return errAway
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v after a try succeeded", err)
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(s.got, want) || !slices.Equal(logged, want) {
		t.Errorf("waits %v, logged %v, want both %v", s.got, logged, want)
	}
}

func TestRetryStopsOnWhatAgainRejects(t *testing.T) {
	s := &sleeps{endAt: -1}
	answer := errors.New("access denied")
	tries := 0
	r := Retry{
		Backoff: Backoff{Initial: time.Second, Max: 10 * time.Second, Sleep: s.sleep},
		Again:   func(err error) bool { return errors.Is(err, errAway) },
	}
	err := r.Do(context.Background(), func() error {
		if tries++; tries < 3 {
			return errAway
		}
		return answer
	})
	if err != answer || tries != 3 || len(s.got) != 2 {
		t.Errorf("Do = %v after %d tries and %d waits, want the answer itself after 3 tries and 2 waits", err, tries, len(s.got))
	}
}

func TestRetryEndsWithCtxDuringAWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sleeps{endAt: 1, cancel: cancel}
	hooks, tries := 0, 0
	r := Retry{
		Backoff: Backoff{Initial: time.Second, Max: 10 * time.Second, Sleep: s.sleep},
		OnRetry: func(error, time.Duration) { hooks++ },
	}
	err := r.Do(ctx, func() error { tries++; return errAway })
	var ended *Ended
	if !errors.As(err, &ended) || !errors.Is(err, errAway) || err.Error() != errAway.Error() {
		t.Fatalf("Do = %#v, want *Ended that reads and unwraps as the last error", err)
	}
	if tries != 2 || hooks != 2 {
		t.Errorf("%d tries, %d OnRetry calls, want 2 and 2 (no try after ctx ended)", tries, hooks)
	}
}

func TestBackoffResetAndRealSleep(t *testing.T) {
	b := Backoff{Initial: time.Millisecond, Max: 3 * time.Millisecond}
	if !b.Wait(context.Background()) || !b.Wait(context.Background()) || b.Next() != 3*time.Millisecond {
		t.Fatalf("after two waits Next = %s, want the cap 3ms", b.Next())
	}
	b.Reset()
	if b.Next() != time.Millisecond {
		t.Errorf("after Reset Next = %s, want 1ms", b.Next())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) || b.Next() != time.Millisecond {
		t.Errorf("Wait with an ended ctx returned true or grew the backoff to %s", b.Next())
	}
}
