package reconcile

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
)

// fakeSource is the source server of a periodic run: a clock, whether it replicates, and the
// report (or error) of each window checked, by the window's start.
type fakeSource struct {
	now        time.Time
	replica    bool
	replicaErr error
	reports    map[time.Time]Report
	errs       map[time.Time]error
	checked    []Window
}

func (s *fakeSource) Now(context.Context) (time.Time, error) { return s.now, nil }

func (s *fakeSource) Replicates(context.Context) (bool, error) { return s.replica, s.replicaErr }

func (s *fakeSource) Check(_ context.Context, w Window) (Report, error) {
	s.checked = append(s.checked, w)
	if err := s.errs[w.Since]; err != nil {
		return Report{}, err
	}
	rep, ok := s.reports[w.Since]
	if !ok {
		rep = Report{Checked: 1, Found: 1, InWindow: 1}
	}
	rep.Since, rep.Until = w.Since, w.Until
	return rep, nil
}

// fakeHost is the daemon as the periodic reconcile sees it.
type fakeHost struct {
	commit time.Time // zero: nothing checkpointed
}

func (fakeHost) Leading() bool { return true }

func (fakeHost) Source() (string, *sql.DB) { return "", nil }

func (h fakeHost) Checkpointed() (time.Time, bool) { return h.commit, !h.commit.IsZero() }

// fakeMarks is the mark kept with the checkpoint; saveErr fails every save.
type fakeMarks struct {
	mark    time.Time
	ok      bool
	saveErr error
	saves   int
}

func (m *fakeMarks) LoadMark(context.Context) (time.Time, bool, error) { return m.mark, m.ok, nil }

func (m *fakeMarks) SaveMark(_ context.Context, t time.Time) error {
	if m.saveErr != nil {
		return m.saveErr
	}
	m.mark, m.ok = t, true
	m.saves++
	return nil
}

// fakeMetrics records the published runs.
type fakeMetrics struct {
	runs    []int // checked, per published report
	missing int
	failed  int
}

func (m *fakeMetrics) ReconcileRun(checked, missing, _ int) {
	m.runs = append(m.runs, checked)
	m.missing = missing
}
func (m *fakeMetrics) ReconcileNullCreatedAt(int) {}
func (m *fakeMetrics) ReconcileFailedRun()        { m.failed++ }

// A periodic run checks the windows from the mark to the horizon, moves the mark past each
// window only once it was checked completely, and publishes what is behind the mark: a failed
// read, an incomplete window or a failed save keep the mark at the last complete window, a
// replica's windows stop at the checkpoint's commit time, and with nothing checkpointed on a
// replica nothing is checked.
func TestPeriodicRun(t *testing.T) {
	const delay, width = 5 * time.Minute, time.Hour
	now := time.Date(2026, 12, 1, 13, 5, 0, 0, time.UTC)
	h := func(n int) time.Time { return time.Date(2026, 12, 1, 10+n, 0, 0, 0, time.UTC) } // h(0) = 10:00
	broke := errors.New("broker down")
	cases := []struct {
		name       string
		src        fakeSource
		host       fakeHost
		marks      fakeMarks
		wantErr    bool
		wantSince  []time.Time // the windows checked, by start
		wantMark   time.Time   // zero: no mark
		wantPub    []int       // checked per published report
		wantMissng int
	}{
		{
			name:      "no mark yet: the last width before the delay",
			src:       fakeSource{now: now},
			wantSince: []time.Time{h(2)}, wantMark: h(3), wantPub: []int{1},
		},
		{
			name:      "behind the mark: back-to-back windows from it",
			src:       fakeSource{now: now},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantSince: []time.Time{h(0), h(1), h(2)}, wantMark: h(3), wantPub: []int{3},
		},
		{
			name: "a failed window keeps the mark at its start; the windows before it are published",
			src: fakeSource{now: now, errs: map[time.Time]error{h(1): broke},
				reports: map[time.Time]Report{h(0): {Checked: 2, Found: 1, Missing: 1, InWindow: 2, MissingEvents: []Event{{EventID: "e1"}}}}},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantErr:   true,
			wantSince: []time.Time{h(0), h(1)}, wantMark: h(1), wantPub: []int{2}, wantMissng: 1,
		},
		{
			name:      "an incomplete window keeps the mark",
			src:       fakeSource{now: now, reports: map[time.Time]Report{h(0): {Checked: 1, InWindow: 2, Unchecked: 1}}},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantErr:   true,
			wantSince: []time.Time{h(0)}, wantMark: h(0),
		},
		{
			name:      "a window whose rows changed while read keeps the mark",
			src:       fakeSource{now: now, reports: map[time.Time]Report{h(0): {Checked: 1, InWindow: 1, Changed: true}}},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantErr:   true,
			wantSince: []time.Time{h(0)}, wantMark: h(0),
		},
		{
			name:      "a mark not saved ends the run there",
			src:       fakeSource{now: now},
			marks:     fakeMarks{mark: h(0), ok: true, saveErr: errors.New("fenced")},
			wantErr:   true,
			wantSince: []time.Time{h(0)}, wantMark: h(0),
		},
		{
			name:      "a replica: no further than the checkpoint's commit time",
			src:       fakeSource{now: now, replica: true},
			host:      fakeHost{commit: h(2).Add(delay)},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantSince: []time.Time{h(0), h(1)}, wantMark: h(2), wantPub: []int{2},
		},
		{
			name:      "not known whether a replica: as a replica",
			src:       fakeSource{now: now, replicaErr: errors.New("access denied")},
			host:      fakeHost{commit: h(1).Add(delay)},
			marks:     fakeMarks{mark: h(0), ok: true},
			wantSince: []time.Time{h(0)}, wantMark: h(1), wantPub: []int{1},
		},
		{
			name:      "a replica, a checkpoint ahead of its clock: the server's NOW()",
			src:       fakeSource{now: now, replica: true},
			host:      fakeHost{commit: now.Add(time.Hour)},
			marks:     fakeMarks{mark: h(2), ok: true},
			wantSince: []time.Time{h(2)}, wantMark: h(3), wantPub: []int{1},
		},
		{
			name:     "a replica, nothing checkpointed: nothing checked, the mark stays",
			src:      fakeSource{now: now, replica: true},
			marks:    fakeMarks{mark: h(0), ok: true},
			wantMark: h(0),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &fakeMetrics{}
			p := &Periodic{
				Config:  &config.Config{Reconcile: &config.Reconcile{Interval: width, Window: width, Delay: delay}},
				Host:    c.host,
				Marks:   &c.marks,
				Metrics: m,
				Now:     func() time.Time { return now },
			}
			err := p.run(context.Background(), &c.src, zerolog.Nop())
			if (err != nil) != c.wantErr {
				t.Fatalf("run: %v, want an error: %v", err, c.wantErr)
			}
			var since []time.Time
			for _, w := range c.src.checked {
				since = append(since, w.Since)
			}
			if !slices.EqualFunc(since, c.wantSince, time.Time.Equal) {
				t.Errorf("windows checked from %v, want %v", since, c.wantSince)
			}
			if !c.marks.mark.Equal(c.wantMark) {
				t.Errorf("mark %v, want %v", c.marks.mark, c.wantMark)
			}
			if !slices.Equal(m.runs, c.wantPub) || m.missing != c.wantMissng {
				t.Errorf("published %v (missing %d), want %v (missing %d)", m.runs, m.missing, c.wantPub, c.wantMissng)
			}
		})
	}
}

// The published report reaches reconcile.out whole, as JSON a reader can decode.
func TestPeriodicWritesReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "reconcile.json")
	now := time.Date(2026, 12, 1, 13, 5, 0, 0, time.UTC)
	src := &fakeSource{now: now, reports: map[time.Time]Report{
		now.Add(-65 * time.Minute): {Checked: 2, Found: 1, Missing: 1, InWindow: 2, MissingEvents: []Event{{EventID: "e1"}}},
	}}
	p := &Periodic{
		Config:  &config.Config{Reconcile: &config.Reconcile{Interval: time.Hour, Window: time.Hour, Delay: 5 * time.Minute, Out: out}},
		Host:    fakeHost{},
		Marks:   &fakeMarks{},
		Metrics: &fakeMetrics{},
	}
	if err := p.run(context.Background(), src, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("reconcile.out: %v", err)
	}
	if rep.Missing != 1 || len(rep.MissingEvents) != 1 || rep.MissingEvents[0].EventID != "e1" {
		t.Errorf("reconcile.out: %+v", rep)
	}
}

// A skew beyond reconcile.delay is warned of when it begins, not at every run (a clock days off
// would repeat it every interval), and an info line says when the clocks agree again; a new
// skew is warned of again.
func TestPeriodicWarnsOfSkewOnce(t *testing.T) {
	now := time.Date(2026, 12, 1, 13, 5, 0, 0, time.UTC)
	var logs bytes.Buffer
	p := &Periodic{
		Config:  &config.Config{Reconcile: &config.Reconcile{Interval: time.Hour, Window: time.Hour, Delay: 5 * time.Minute}},
		Host:    fakeHost{},
		Marks:   &fakeMarks{},
		Metrics: &fakeMetrics{},
		Now:     func() time.Time { return now },
	}
	log := zerolog.New(&logs)
	for _, dbAhead := range []time.Duration{48 * time.Hour, 48 * time.Hour, 47 * time.Hour, time.Minute, 0, -48 * time.Hour, -48 * time.Hour} {
		if err := p.run(context.Background(), &fakeSource{now: now.Add(dbAhead)}, log); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m struct {
			Level   string  `json:"level"`
			Message string  `json:"message"`
			Skew    float64 `json:"skew_seconds"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m.Message, "clock") {
			got = append(got, fmt.Sprintf("%s %.0f", m.Level, m.Skew))
		}
	}
	want := []string{"warn 172800", "info 60", "warn -172800"}
	if !slices.Equal(got, want) {
		t.Fatalf("clock lines %q, want %q", got, want)
	}
}
