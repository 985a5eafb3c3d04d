package consumer_test

import (
	"bytes"
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
	"github.com/outboxd/outboxd/testenv/faultproxy"
)

// The connection is lost during COMMIT after the server received it: the driver returns an
// error, Handle does not ack, but the work and the mark did commit. The redelivery must then
// be a duplicate, not a second run.
func TestCommitOutcomeUnknownRedeliveryIsDuplicate(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	cfg, err := mysql.ParseDSN(f.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var armed, cut atomic.Bool
	var proxy *faultproxy.Proxy
	proxy, err = faultproxy.NewTapped(cfg.Addr, func(c faultproxy.Chunk) {
		// COM_QUERY "COMMIT", just written to the server: hold back its answer, then break
		// the connection, as a network failure would.
		if c.Dir == faultproxy.Upstream && armed.Load() && bytes.Contains(c.Data, []byte("\x03COMMIT")) && cut.CompareAndSwap(false, true) {
			proxy.SetMode(faultproxy.Blackhole)
			time.AfterFunc(500*time.Millisecond, func() { proxy.SetMode(faultproxy.Pass) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg.Addr = proxy.Addr()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	kit, err := consumer.New(db, consumer.Options{Handler: kittest.Handler})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		runs.Add(1)
		if err := grant(11)(ctx, tx, msg); err != nil {
			return err
		}
		armed.Store(true)
		return nil
	}
	msg := consumer.Message{EventID: "ev-11", MsgID: "t/0@11"}
	if out, err := kit.Handle(ctx, msg, fn); err == nil || !cut.Load() {
		t.Fatalf("commit with its answer lost: %v %v (cut %v), want an error (no ack)", out, err, cut.Load())
	} else {
		t.Logf("commit outcome unknown: %v", err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit") + f.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'ev-11'"); n != 2 {
		t.Fatalf("the server did not commit the work and the mark (%d rows); the test did not cut after COMMIT", n)
	}
	if out, err := kit.Handle(ctx, msg, fn); err != nil || out != consumer.Duplicate || runs.Load() != 1 {
		t.Fatalf("redelivery: %v %v (function ran %d times), want duplicate, once", out, err, runs.Load())
	}
}
