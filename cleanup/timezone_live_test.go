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

// A DATETIME created_at holds the wall-clock time of the inserting session's time_zone, which
// need not be the server's default: an application 8 hours behind the server writes rows that
// look 8 hours old the moment they are inserted. The sweep must compare in the zone the rows
// were written in, or it deletes rows of transactions the checkpoint does not cover.
func TestSweepDatetimeTimeZone(t *testing.T) {
	ctx := context.Background()
	db := liveDB(t)
	db.SetMaxOpenConns(1) // one session: its time_zone is the application's below, then reset
	for _, q := range []string{"SET GLOBAL time_zone = '+00:00'", "SET time_zone = '+00:00'", "CREATE DATABASE shop",
		"CREATE TABLE shop.outbox (id BIGINT PRIMARY KEY, event_id VARCHAR(64), created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		server.HoldTableSQL("shop.hold"),
		"SET time_zone = '-08:00'", // the application's session
		"INSERT INTO shop.outbox (id, event_id) VALUES (1, 'old')",
		"UPDATE shop.outbox SET created_at = created_at - INTERVAL 1 HOUR", // committed an hour ago: covered
		"INSERT INTO shop.outbox (id, event_id) VALUES (2, 'new')",         // just now: not covered
		"SET time_zone = '+00:00'",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ckpt := time.Now().Add(-10 * time.Minute) // covers row 1 only
	sweep := func(tz string) []string {
		t.Helper()
		st := config.CleanupSettings{Retention: time.Second, Batch: 10, MaxRowsPerSecond: 1000, Interval: time.Second, CommitMargin: time.Minute,
			CreatedAt: "created_at", HoldTable: "shop.hold", TimeZone: tz}
		c, err := New(Config{DB: db, Logger: zerolog.New(zerolog.NewTestWriter(t)),
			Checkpoint: func() (time.Time, bool) { return ckpt, true },
			Tables:     []Table{{Schema: "shop", Name: "outbox", PK: []string{"id"}, EventID: "event_id", Settings: st, CreatedAtDatetime: true}}})
		if err != nil {
			t.Fatal(err)
		}
		c.begin(ctx, time.Now().Add(-24*time.Hour)) // recording dead letters since yesterday
		if err := c.sweep(ctx, c.tables[0], &limiter{perSecond: 1000, now: time.Now, sleep: wait.Sleep}); err != nil {
			t.Fatal(err)
		}
		var left []string
		rows, err := db.Query("SELECT event_id FROM shop.outbox ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var e string
			if err := rows.Scan(&e); err != nil {
				t.Fatal(err)
			}
			left = append(left, e)
		}
		return left
	}
	// A zone the server does not know converts to NULL: nothing goes.
	if left := sweep("Mars/Olympus"); len(left) != 2 {
		t.Fatalf("unknown zone: rows left %v, want both", left)
	}
	if left := sweep("-08:00"); len(left) != 1 || left[0] != "new" {
		t.Fatalf("rows left %v: want only the row the checkpoint does not cover ('new')", left)
	}
}
