package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/outboxd/outboxd/consumer"
)

// Two deliveries of one event at once, the first failing transiently: the second's dedup insert
// waits on the first's row lock, and when the first rolls back it goes on and processes the
// event (not a duplicate: nothing was committed).
func TestConcurrentDeliveryProceedsWhenTheFirstRollsBack(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	holding := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-w"}, func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
			if err := grant(1)(ctx, tx, m); err != nil {
				return err
			}
			close(holding)
			time.Sleep(500 * time.Millisecond) // the second delivery arrives and waits
			return errors.New("benefit service down")
		})
		first <- err
	}()
	<-holding
	start := time.Now()
	out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-w"}, grant(1))
	waited := time.Since(start)
	if err != nil || out != consumer.Processed {
		t.Fatalf("second delivery: %v %v, want processed after the first rolled back", out, err)
	}
	if err := <-first; err == nil {
		t.Fatal("first delivery: no error")
	}
	if waited < 300*time.Millisecond {
		t.Fatalf("second delivery took %v: it did not wait for the first's lock", waited)
	}
	if f.Count(t, "SELECT COUNT(*) FROM benefit") != 1 || f.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE status = 'PROCESSED'") != 1 {
		t.Fatal("want one benefit and one PROCESSED mark")
	}
}
