package reconcile

import (
	"testing"
	"time"
)

// Windows cover [min(mark, now-delay-width), now-delay) exactly: back to back, none wider than
// width, and a mark saved after each window resumes where it stopped.
func TestReconcileWindowsFromMark(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name               string
		mark, now          time.Time
		delay, width       time.Duration
		want               int
		wantSince, wantEnd time.Time
	}{
		{"one window", t0, t0.Add(65 * time.Minute), 5 * time.Minute, time.Hour, 1, t0, t0.Add(time.Hour)},
		{"behind: split", t0, t0.Add(3*time.Hour + 5*time.Minute + time.Second), 5 * time.Minute, time.Hour, 4, t0, t0.Add(3*time.Hour + time.Second)},
		{"mark inside the last width: that width again", t0, t0.Add(10 * time.Minute), 5 * time.Minute, time.Hour, 1, t0.Add(-55 * time.Minute), t0.Add(5 * time.Minute)},
		{"caught up: the last width again", t0, t0.Add(5 * time.Minute), 5 * time.Minute, time.Hour, 1, t0.Add(-time.Hour), t0},
		{"mark ahead (server clock behind)", t0, t0.Add(-time.Hour), 5 * time.Minute, time.Hour, 1, t0.Add(-2*time.Hour - 5*time.Minute), t0.Add(-time.Hour - 5*time.Minute)},
	}
	for _, c := range cases {
		ws := Windows(c.mark, c.now, c.delay, c.width)
		if len(ws) != c.want {
			t.Fatalf("%s: %d windows %v, want %d", c.name, len(ws), ws, c.want)
		}
		if len(ws) == 0 {
			continue
		}
		if !ws[0].Since.Equal(c.wantSince) || !ws[len(ws)-1].Until.Equal(c.wantEnd) {
			t.Errorf("%s: windows %v, want %s .. %s", c.name, ws, c.wantSince, c.wantEnd)
		}
		for i, w := range ws {
			if err := w.Validate(); err != nil {
				t.Errorf("%s: window %d: %v", c.name, i, err)
			}
			if w.Until.Sub(w.Since) > c.width {
				t.Errorf("%s: window %d is %s wide, more than %s", c.name, i, w.Until.Sub(w.Since), c.width)
			}
			if i > 0 && !w.Since.Equal(ws[i-1].Until) {
				t.Errorf("%s: window %d starts at %s, the previous ends at %s: a gap or an overlap", c.name, i, w.Since, ws[i-1].Until)
			}
		}
	}
	// A run that stopped after two windows (its mark at the second's end) resumes there: the
	// windows of the two runs together are those of one uninterrupted run (the last one reaching
	// the later end).
	now := t0.Add(4 * time.Hour)
	all := Windows(t0, now, time.Minute, time.Hour)
	resumed := append(all[:2:2], Windows(all[1].Until, now.Add(30*time.Second), time.Minute, time.Hour)...)
	for i := range all[:len(all)-1] {
		if all[i] != resumed[i] || len(resumed) != len(all) || !resumed[len(all)-1].Since.Equal(all[len(all)-1].Since) {
			t.Fatalf("resumed windows %v, want %v", resumed, all)
		}
	}
	if last := resumed[len(resumed)-1]; !last.Until.Equal(now.Add(30*time.Second - time.Minute)) {
		t.Fatalf("resumed run ends at %s", last.Until)
	}
	if got := FirstMark(now, time.Minute, time.Hour); !got.Equal(now.Add(-61 * time.Minute)) {
		t.Fatalf("FirstMark %s", got)
	}
}
