package cleanup

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/config"
)

// The hold table's marker: recording starts at the first term, stays while every checkpoint
// was certified before it was saved, and starts over when the checkpoint moved on uncertified
// (cleanup off meanwhile, or a stop between the certificate and the save).
func TestSinceMarker(t *testing.T) {
	ctx := context.Background()
	db := liveDB(t)
	for _, q := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.outbox (id BIGINT PRIMARY KEY, event_id VARCHAR(64), created_at DATETIME(6))",
		server.HoldTableSQL("shop.hold")} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	newC := func() *Cleaner {
		c, err := New(Config{DB: db, Logger: zerolog.New(zerolog.NewTestWriter(t)), Tables: []Table{{Schema: "shop", Name: "outbox", PK: []string{"id"}, EventID: "event_id",
			Settings: config.CleanupSettings{Retention: time.Hour, Batch: 10, MaxRowsPerSecond: 10, Interval: time.Second, CommitMargin: time.Second,
				CreatedAt: "created_at", HoldTable: "shop.hold"}}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	since := func(c *Cleaner) float64 {
		p := c.tables[0].since.Load()
		if p == nil {
			t.Fatal("since unknown")
		}
		return *p
	}
	c0 := time.Unix(1_800_000_000, 0)
	c := newC()
	c.begin(ctx, c0)
	if got := since(c); got != 1_800_000_000 {
		t.Fatalf("first term: since %v, want the checkpoint's commit time", got)
	}
	c.certify(c0.Add(time.Minute)) // saves of this term
	c = newC()
	c.begin(ctx, c0.Add(time.Minute)) // resumes from the last certified save
	if got := since(c); got != 1_800_000_000 {
		t.Fatalf("continuous: since %v, want it kept", got)
	}
	c = newC()
	c.begin(ctx, c0.Add(time.Hour)) // the checkpoint moved on while nothing recorded
	if got := since(c); got != 1_800_003_600 {
		t.Fatalf("after a gap: since %v, want the new checkpoint's commit time", got)
	}
	// A marker advances only forward.
	c.certify(c0)
	var through float64
	if err := db.QueryRow("SELECT UNIX_TIMESTAMP(held_at) FROM shop.hold WHERE tbl = 'shop.outbox' AND event_id = ''").Scan(&through); err != nil || through != 1_800_003_600 {
		t.Fatalf("through %v (%v)", through, err)
	}
}

// begin establishes since for every swept table from the checkpoint commit time ckpt, as
// ensureBegun does for one table and session.
func (c *Cleaner) begin(ctx context.Context, ckpt time.Time) {
	for _, t := range c.tables {
		if !t.Settings.Sweeps() {
			continue
		}
		since, err := c.beginTable(ctx, t, ckpt)
		if err != nil {
			c.cfg.Metrics.CleanupFailed(t.label)
			c.cfg.Logger.Warn().Err(err).Str("table", t.label).Msg("cleanup: the hold table's marker not read or written; the created_at sweep stays off in this term")
			continue
		}
		t.since.Store(&since)
	}
}
