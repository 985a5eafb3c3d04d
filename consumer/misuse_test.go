package consumer_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/outboxd/outboxd/consumer"
)

// A function that panics: the deferred rollback undoes its work and the mark, and gives the
// connection back (with one connection in the pool, the next Handle would block otherwise).
// A function that ends the transaction itself: after its Commit the redelivery is a duplicate;
// after its Rollback nothing is kept and the redelivery processes the event.
func TestFunctionThatPanicsOrEndsTheTransaction(t *testing.T) {
	f := newFixture(t)
	f.DB.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_, _ = f.Kit.Handle(ctx, consumer.Message{EventID: "ev-p"}, func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
			if err := grant(1)(ctx, tx, m); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit") + f.Count(t, "SELECT COUNT(*) FROM consumed_event"); n != 0 {
		t.Fatalf("the panicking function left %d rows (work or mark)", n)
	}
	if out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-p"}, grant(1)); err != nil || out != consumer.Processed {
		t.Fatalf("after the panic: %v %v, want processed (the connection back in the pool)", out, err)
	}

	runs := 0
	commits := func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
		runs++
		if err := grant(2)(ctx, tx, m); err != nil {
			return err
		}
		return tx.Commit()
	}
	if _, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-c"}, commits); err == nil {
		t.Fatal("a function that committed the transaction itself: no error")
	}
	if out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-c"}, commits); err != nil || out != consumer.Duplicate || runs != 1 {
		t.Fatalf("redelivery after the function's own commit: %v %v (ran %d times), want duplicate", out, err, runs)
	}
	rollsBack := func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
		if err := grant(3)(ctx, tx, m); err != nil {
			return err
		}
		return tx.Rollback()
	}
	if _, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-r"}, rollsBack); err == nil {
		t.Fatal("a function that rolled the transaction back itself: no error")
	}
	if out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-r"}, grant(3)); err != nil || out != consumer.Processed {
		t.Fatalf("redelivery after the function's own rollback: %v %v, want processed", out, err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit"); n != 3 {
		t.Fatalf("%d benefits, want 3", n)
	}
}
