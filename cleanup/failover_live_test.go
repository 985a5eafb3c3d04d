package cleanup

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/config"
)

// After a failover the writer is a new primary that may lack the newest hold-table rows
// (asynchronous replication): a dead letter's hold row, and the marker's certificates after
// it. A new pipeline session (every reconnect) makes the sweep read the marker again before it
// deletes anything, so it starts the record over at the checkpoint instead of trusting what it
// read from the old primary; the dead-lettered row whose hold row was lost stays.
func TestSweepRereadsMarkerAfterReconnect(t *testing.T) {
	ctx := context.Background()
	db := liveDB(t)
	now := time.Now()
	at := func(d time.Duration) float64 { return float64(now.Add(d).UnixMicro()) / 1e6 }
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"CREATE DATABASE shop", nil},
		{"CREATE TABLE shop.outbox (id BIGINT PRIMARY KEY, event_id VARCHAR(64), created_at TIMESTAMP(6) NOT NULL)", nil},
		{server.HoldTableSQL("shop.hold"), nil},
		// Recording since two hours ago, certified up to now (on the old primary).
		{"INSERT INTO shop.hold VALUES ('shop.outbox', '', ?, '', FROM_UNIXTIME(?))", []any{at(-2 * time.Hour), at(0)}},
		{"INSERT INTO shop.hold VALUES ('shop.outbox', 'dl', '1', '0-1-5', NOW(6))", nil},
		{"INSERT INTO shop.outbox VALUES (1, 'dl', FROM_UNIXTIME(?))", []any{at(-30 * time.Minute)}},
	} {
		if _, err := db.Exec(q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	st := config.CleanupSettings{Retention: time.Second, Batch: 10, MaxRowsPerSecond: 1000, Interval: time.Second, CommitMargin: time.Second,
		CreatedAt: "created_at", HoldTable: "shop.hold"}
	c, err := New(Config{DB: db, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Checkpoint: func() (time.Time, bool) { return now.Add(-time.Minute), true },
		Tables:     []Table{{Schema: "shop", Name: "outbox", PK: []string{"id"}, EventID: "event_id", Settings: st}}})
	if err != nil {
		t.Fatal(err)
	}
	c.Session()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	left := func() (n int) {
		if err := db.QueryRow("SELECT COUNT(*) FROM shop.outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	time.Sleep(1500 * time.Millisecond)
	if left() != 1 {
		t.Fatal("the held row was swept")
	}
	// The failover: the new primary lacks the hold row and the marker's newest certificates;
	// the pipeline reconnects with a new session.
	for _, q := range []string{"DELETE FROM shop.hold WHERE event_id = 'dl'", "UPDATE shop.hold SET held_at = NOW(6) - INTERVAL 1 HOUR WHERE event_id = ''"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c.Session()
	time.Sleep(2500 * time.Millisecond)
	if left() != 1 {
		t.Fatal("the dead-lettered row whose hold row the failover lost was swept: the sweep kept the marker it read from the old primary")
	}
}
