package cleanup

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/wait"
)

// Rows the sweep leaves (older than the hold table's record, held, or too young) at the low end
// of the primary key are read once per round, not once per batch: each batch's candidates
// continue after the previous batch's last key. Otherwise 2,000 rows kept from before cleanup
// are scanned again for every batch of 10, and the load is bounded by neither batch nor rate.
func TestSweepPagesByKey(t *testing.T) {
	ctx := context.Background()
	db := liveDB(t)
	db.SetMaxOpenConns(1) // one session: its handler counters are the sweep's
	for _, q := range []string{"CREATE DATABASE shop",
		"CREATE TABLE shop.outbox (region VARCHAR(8), id BIGINT, event_id VARCHAR(64), created_at TIMESTAMP(6) NOT NULL, PRIMARY KEY (region, id))",
		server.HoldTableSQL("shop.hold"),
		// Kept: from before the hold table's record began.
		"INSERT INTO shop.outbox SELECT 'eu', seq, CONCAT('old', seq), NOW(6) - INTERVAL 2 DAY FROM mysql.seq_1_to_2000",
		// Swept.
		"INSERT INTO shop.outbox SELECT 'eu', 2000 + seq, CONCAT('e', seq), NOW(6) - INTERVAL 1 HOUR FROM mysql.seq_1_to_300",
		"INSERT INTO shop.outbox SELECT 'us', seq, CONCAT('u', seq), NOW(6) - INTERVAL 1 HOUR FROM mysql.seq_1_to_5",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st := config.CleanupSettings{Retention: time.Second, Batch: 10, MaxRowsPerSecond: 1_000_000, Interval: time.Second, CommitMargin: time.Second,
		CreatedAt: "created_at", HoldTable: "shop.hold"}
	c, err := New(Config{DB: db, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Checkpoint: func() (time.Time, bool) { return time.Now(), true },
		Tables:     []Table{{Schema: "shop", Name: "outbox", PK: []string{"region", "id"}, EventID: "event_id", Settings: st}}})
	if err != nil {
		t.Fatal(err)
	}
	c.begin(ctx, time.Now().Add(-24*time.Hour))
	reads := func() (n int64) {
		var name string
		if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Handler_read_next'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := reads()
	if err := c.sweep(ctx, c.tables[0], &limiter{perSecond: 1_000_000, now: time.Now, sleep: wait.Sleep}); err != nil {
		t.Fatal(err)
	}
	read := reads() - before
	var left, old int
	if err := db.QueryRow("SELECT COUNT(*), SUM(event_id LIKE 'old%') FROM shop.outbox").Scan(&left, &old); err != nil {
		t.Fatal(err)
	}
	if left != 2000 || old != 2000 {
		t.Fatalf("%d rows left (%d kept from before), want the 2,000 kept", left, old)
	}
	// 31 batches: one pass over the 2,305 rows is about 2,400 reads; a scan per batch 70,000.
	if read > 10_000 {
		t.Fatalf("the sweep read %d index entries for 305 deletes over 2,305 rows: it rescans the rows it keeps for every batch", read)
	}
	t.Logf("%d index reads", read)
}
