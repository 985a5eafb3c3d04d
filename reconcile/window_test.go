package reconcile

import (
	"testing"
	"time"
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
