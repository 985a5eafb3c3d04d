package cleanup

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/pipeline"
)

func testCleaner(t *testing.T, capacity int) *Cleaner {
	t.Helper()
	c := &Cleaner{cfg: Config{QueueKeys: capacity}, byName: map[tableRef]*table{}, wake: make(chan struct{}, 1)}
	tb := &table{Table: Table{Schema: "shop", Name: "outbox", PK: []string{"region", "id"}, EventID: "event_id",
		Settings: config.CleanupSettings{Retention: 0, Batch: 3}}, label: "shop.outbox", q: queue{cap: capacity}}
	tb.stmts = newStatements(tb.Table)
	c.tables = []*table{tb}
	c.byName[tableRef{"shop", "outbox"}] = tb
	return c
}

func row(seq uint64, id int64, eventID string) pipeline.Row {
	buf := []byte("eu" + eventID)
	return pipeline.Row{Seq: seq, Event: &binlog.Event{Schema: "shop", Table: "outbox",
		EventID: binlog.Field{Bytes: buf[2:]}, PK: []any{string(buf[:2]), id}}}
}

// A key is taken only once a save covers its transaction, at most a batch at a time, and it
// owns its values (the event's buffer may be reused).
func TestQueueTakesOnlyCovered(t *testing.T) {
	c := testCleaner(t, 100)
	s := c.Session().(*session)
	rows := []pipeline.Row{row(0, 1, "e1"), row(2, 3, "e3"), row(1, 2, "e2"), row(0, 4, "e4"), row(0, 5, "e5")}
	s.Delivered(rows)
	rows[0].Event.EventID.Bytes[0] = 'X' // the event's memory is the pipeline's
	tb := c.tables[0]
	if ks := tb.q.take(3, s); len(ks) != 0 {
		t.Fatalf("took %d keys before any save", len(ks))
	}
	s.Saved(1) // covers seq 0 only
	ks := tb.q.take(3, s)
	if len(ks) != 3 || ks[0].eventID != "e1" || !reflect.DeepEqual(ks[0].vals, []any{"eu", int64(1)}) || ks[1].eventID != "e4" || ks[2].eventID != "e5" {
		t.Fatalf("first batch %+v", ks)
	}
	if ks := tb.q.take(3, s); len(ks) != 0 {
		t.Fatalf("took %+v: not covered yet", ks)
	}
	s.Saved(3)
	ks = tb.q.take(3, s)
	if len(ks) != 2 || ks[0].eventID != "e3" || ks[1].eventID != "e2" {
		t.Fatalf("second batch %+v", ks)
	}
	q, args := tb.stmts.deleteKeys(ks)
	if q != "DELETE FROM `shop`.`outbox` WHERE (`region`, `id`) IN ((?, ?), (?, ?)) AND (`region`, `id`, BINARY `event_id`) IN ((?, ?, BINARY ?), (?, ?, BINARY ?))" ||
		!reflect.DeepEqual(args, []any{"eu", int64(3), "eu", int64(2), "eu", int64(3), "e3", "eu", int64(2), "e2"}) {
		t.Fatalf("DELETE %q %v", q, args)
	}
}

// A full queue drops keys and counts them; a new session drops the keys of the old one that
// no save of it covered (the new session reads those rows again), and keeps the covered ones.
func TestQueueFullAndSessions(t *testing.T) {
	c := testCleaner(t, 2)
	s1 := c.Session().(*session)
	s1.Delivered([]pipeline.Row{row(0, 1, "e1"), row(1, 2, "e2"), row(2, 3, "e3")})
	tb := c.tables[0]
	if tb.q.len() != 2 || tb.q.dropped.Load() != 1 {
		t.Fatalf("queued %d, dropped %d", tb.q.len(), tb.q.dropped.Load())
	}
	s1.Saved(1)
	s2 := c.Session().(*session)
	ks := tb.q.take(10, s2)
	if len(ks) != 1 || ks[0].eventID != "e1" || tb.q.len() != 0 {
		t.Fatalf("took %+v, %d left", ks, tb.q.len())
	}
	// A row without a key (MINIMAL metadata), of another table, or whose key has another width
	// is not queued.
	s2.Delivered([]pipeline.Row{
		{Seq: 0, Event: &binlog.Event{Schema: "shop", Table: "outbox"}},
		{Seq: 0, Event: &binlog.Event{Schema: "shop", Table: "other", PK: []any{int64(1)}}},
		{Seq: 0, Event: &binlog.Event{Schema: "shop", Table: "outbox", PK: []any{int64(1)}}},
	})
	if tb.q.len() != 0 {
		t.Fatalf("queued %d keys that cannot be deleted", tb.q.len())
	}
}

func TestLimiterBoundsRate(t *testing.T) {
	now := time.Unix(1000, 0)
	var slept time.Duration
	l := &limiter{perSecond: 100, now: func() time.Time { return now },
		sleep: func(_ context.Context, d time.Duration) bool { slept += d; now = now.Add(d); return true }}
	for range 10 {
		l.wait(context.Background(), 50)
	}
	// 500 rows at 100/s: the first batch at once, the other nine 0.5 s apart.
	if slept != 4500*time.Millisecond {
		t.Fatalf("slept %s for 500 rows at 100/s, want 4.5s", slept)
	}
}

// Proven rows are deleted by primary key, with the event id matched as bytes: also when it is a
// key column, whose collation may be case-insensitive.
func TestDeleteStatements(t *testing.T) {
	tb := Table{Schema: "shop", Name: "outbox", PK: []string{"region", "id"}, EventID: "event_id",
		Settings: config.CleanupSettings{CreatedAt: "created_at"}}
	s := newStatements(tb)
	q, args := s.deleteRows([][]any{{"eu", int64(1)}, {"us", int64(2)}}, []string{"e1", "E1"})
	want := "DELETE FROM `shop`.`outbox` WHERE (`region`, `id`) IN ((?, ?), (?, ?)) AND (`region`, `id`, BINARY `event_id`) IN ((?, ?, BINARY ?), (?, ?, BINARY ?))"
	if q != want || !reflect.DeepEqual(args, []any{"eu", int64(1), "us", int64(2), "eu", int64(1), "e1", "us", int64(2), "E1"}) {
		t.Fatalf("%q %v", q, args)
	}
	if !strings.Contains(s.oldest, "ORDER BY `region`, `id` LIMIT 1") {
		t.Fatalf("oldest %q", s.oldest)
	}
	s = newStatements(Table{Schema: "a", Name: "b", PK: []string{"event_id"}, EventID: "event_id"})
	if q, _ := s.deleteRows([][]any{{"x"}}, []string{"x"}); q != "DELETE FROM `a`.`b` WHERE (`event_id`) IN ((?)) AND (`event_id`, BINARY `event_id`) IN ((?, BINARY ?))" {
		t.Fatalf("%q", q)
	}
}

// The queue is bounded in bytes too: keys of a wide primary key (a VARCHAR(3072) column) would
// otherwise hold 50,000 × 3 KB per table.
func TestQueueBoundedInBytes(t *testing.T) {
	c := testCleaner(t, 100)
	tb := c.tables[0]
	tb.q.maxBytes = 10 << 10
	s := c.Session().(*session)
	wide := strings.Repeat("x", 3000)
	var rows []pipeline.Row
	for i := range 10 {
		rows = append(rows, pipeline.Row{Seq: 0, Event: &binlog.Event{Schema: "shop", Table: "outbox",
			EventID: binlog.Field{Bytes: []byte("e")}, PK: []any{wide, int64(i)}}})
	}
	s.Delivered(rows)
	if n := tb.q.len(); n != 3 || tb.q.dropped.Load() != 7 {
		t.Fatalf("queued %d keys of 3 KB under 10 KiB, dropped %d; want 3 and 7", n, tb.q.dropped.Load())
	}
	s.Saved(1)
	if ks := tb.q.take(10, s); len(ks) != 3 {
		t.Fatalf("took %d", len(ks))
	}
	s.Delivered(rows[:3]) // the bytes taken are free again
	if n := tb.q.len(); n != 3 {
		t.Fatalf("queued %d after the queue was emptied, want 3", n)
	}
}
