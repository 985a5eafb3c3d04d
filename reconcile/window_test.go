package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2026-12-01T10:00:00Z", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{"2026-12-01T10:00:00.5+02:00", time.Date(2026, 12, 1, 8, 0, 0, 5e8, time.UTC)},
		{"now", now},
		{"-1h", now.Add(-time.Hour)},
		{"-1h30m", now.Add(-90 * time.Minute)},
		{"+5m", now.Add(5 * time.Minute)},
	} {
		got, err := ParseTime(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "2026-12-01", "10:00", "1 hour"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q): no error", bad)
		}
	}
}

func TestWindow(t *testing.T) {
	a := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := a.Add(time.Hour)
	if err := (Window{Since: a, Until: b}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []Window{{}, {Since: a}, {Since: b, Until: a}, {Since: a, Until: a}} {
		if err := w.Validate(); err == nil {
			t.Errorf("%+v: no error", w)
		}
	}
	from, to := Window{Since: a, Until: b}.Range(time.Minute, 5*time.Minute)
	if !from.Equal(a.Add(-time.Minute)) || !to.Equal(b.Add(5*time.Minute)) {
		t.Fatalf("Range = %v, %v", from, to)
	}
}

// Bounds outside what FROM_UNIXTIME and a broker's time index take are clamped, never passed
// on (FROM_UNIXTIME would answer NULL and select no row; a negative Kafka timestamp is a
// special value).
func TestWindowClamped(t *testing.T) {
	w := Window{Since: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	lo, hi := sqlBounds(w)
	if lo != "0.000000" || hi != "2147483647.999999" {
		t.Fatalf("sqlBounds = %s, %s", lo, hi)
	}
	if from, _ := w.Range(time.Minute, time.Minute); !from.Equal(time.Unix(0, 0)) {
		t.Fatalf("Range from = %v, want the epoch", from)
	}
	in := Window{Since: time.Unix(1700000000, 500000e3), Until: time.Unix(1700003600, 0)}
	if lo, hi := sqlBounds(in); lo != "1700000000.500000" || hi != "1700003600.000000" {
		t.Fatalf("sqlBounds of an ordinary window = %s, %s", lo, hi)
	}
}

// The slice query reads only what routing needs: no key value and no payload bytes (only
// whether the payload is NULL); a configured column the table lacks is a constant and marked
// missing.
func TestSelectQueryColumns(t *testing.T) {
	tb := config.Table{Table: "shop.outbox_event", Columns: config.Columns{EventID: "event_id", Key: "biz_key", Topic: "topic",
		Payload: "payload", EventType: "event_type", Headers: "headers", CreatedAt: "created_at"}}
	types := map[string]string{"event_id": "varchar", "biz_key": "varchar", "topic": "varchar", "payload": "longblob",
		"headers": "longtext", "created_at": "datetime"}
	q, missing := selectQuery(tb, types, "", nil)
	sel, _, _ := strings.Cut(q, " FROM ")
	for _, col := range []string{"`event_id`", "`topic`", "`payload` IS NULL", "`headers`", "UNIX_TIMESTAMP(`created_at`)"} {
		if !strings.Contains(sel, col) {
			t.Errorf("%s does not select %s", sel, col)
		}
	}
	if strings.Contains(sel, "biz_key") || strings.Contains(strings.ReplaceAll(sel, "`payload` IS NULL", ""), "payload") {
		t.Errorf("%s reads the key or the payload", sel)
	}
	if !missing["event_type"] || missing["key"] || len(missing) != 1 {
		t.Errorf("missing %v, want only event_type", missing)
	}
}
