package reconcile

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// record is one message a timedReader holds: its event id and broker time.
type record struct {
	id string
	at time.Time
}

// timedReader is a broker whose records have times: Count counts only those in [from, to),
// as the real readers do, and records the most event ids one call was asked about (the rows
// held) and how many records it read.
type timedReader struct {
	recs    []record // by time
	peakIDs int
	read    int
	calls   int
}

func (f *timedReader) Count(_ context.Context, _ string, from, to time.Time, counts map[string]int) error {
	f.calls++
	f.peakIDs = max(f.peakIDs, len(counts))
	i := sort.Search(len(f.recs), func(i int) bool { return !f.recs[i].at.Before(from) })
	for ; i < len(f.recs) && f.recs[i].at.Before(to); i++ {
		f.read++
		if _, ok := counts[f.recs[i].id]; ok {
			counts[f.recs[i].id]++
		}
	}
	return nil
}

func (f *timedReader) Close() error { return nil }

// Memory is bounded by SliceRows whatever the window, and the result is exact at the slice
// edges: 36,000 rows over an hour are checked in slices of at most 1,000 rows (no Count is
// asked about more ids), records stamped anywhere within the slack of their row (as early as
// created_at - Before, as late as created_at + After) are found whichever slice the row falls
// in, a copy stamped up to After later (in the next slice's time) is one duplicate, a record
// stamped later than the slack but inside the window is found (by the second look), and rows
// without a record are exactly the missing ones.
func TestCheckSlicesBoundedAndExact(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	w := Window{Since: since, Until: since.Add(time.Hour)}
	const n, sliceRows = 36_000, 1_000
	before, after := 2*time.Minute, 3*time.Minute
	var rows []row
	fr := &timedReader{}
	wantMissing, wantDup := map[string]bool{}, map[string]bool{}
	for i := range n {
		id := "e" + strconv.Itoa(i)
		at := since.Add(time.Duration(i) * 100 * time.Millisecond)
		rows = append(rows, outboxRow(id, "order.created", at))
		switch {
		case i%997 == 0:
			wantMissing[id] = true
			continue
		case i%1009 == 0 && i < n/2:
			// Stored long after the slack (a RocketMQ backlog after an outage): outside the
			// slice's range, found by the second look over the rest of the window.
			fr.recs = append(fr.recs, record{id, at.Add(20 * time.Minute)})
			continue
		case i%3 == 0:
			fr.recs = append(fr.recs, record{id, at.Add(-before)}) // the earliest the slack allows
		case i%3 == 1:
			fr.recs = append(fr.recs, record{id, at.Add(after - time.Millisecond)}) // the latest
		default:
			fr.recs = append(fr.recs, record{id, at})
		}
		if i%701 == 0 {
			wantDup[id] = true
			fr.recs = append(fr.recs, record{id, at.Add(after - time.Millisecond)})
		}
	}
	// An id stamped outside every row's reach is not counted for anyone.
	fr.recs = append(fr.recs, record{"e5", w.Until.Add(time.Hour)})
	sort.SliceStable(fr.recs, func(i, j int) bool { return fr.recs[i].at.Before(fr.recs[j].at) })

	cfg := testConfig(t, config.OnPoisonStop)
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := check(context.Background(), cfg, rt, rowsSource(rows),
		Options{Window: w, Before: before, After: after, SliceRows: sliceRows, Readers: map[string]Reader{"main": fr}})
	if err != nil {
		t.Fatal(err)
	}
	if fr.peakIDs > sliceRows {
		t.Errorf("a Count was asked about %d event ids at once, want at most SliceRows %d", fr.peakIDs, sliceRows)
	}
	if fr.calls < n/sliceRows {
		t.Errorf("%d slices for %d rows, want at least %d", fr.calls, n, n/sliceRows)
	}
	if rep.Checked != n || rep.Missing != len(wantMissing) || rep.Found != n-len(wantMissing) || rep.Duplicated != len(wantDup) {
		t.Errorf("checked %d found %d missing %d duplicated %d, want %d, %d, %d, %d",
			rep.Checked, rep.Found, rep.Missing, rep.Duplicated, n, n-len(wantMissing), len(wantMissing), len(wantDup))
	}
	for _, e := range rep.MissingEvents {
		if !wantMissing[e.EventID] {
			t.Errorf("%s reported missing", e.EventID)
		}
	}
	for _, e := range rep.DuplicatedEvents {
		if !wantDup[e.EventID] || e.Found != 2 {
			t.Errorf("%s reported duplicated with %d copies", e.EventID, e.Found)
		}
	}
	for i := 1; i < len(rep.MissingEvents); i++ {
		if rep.MissingEvents[i].CreatedAt.Before(rep.MissingEvents[i-1].CreatedAt) {
			t.Fatalf("missing list out of created_at order at %d", i)
		}
	}
	t.Logf("%d rows in %d slices, %d records read for %d held (%.1fx)", n, fr.calls, fr.read, len(fr.recs), float64(fr.read)/float64(len(fr.recs)))

	// The lists stop at MaxListed; the counts do not.
	rep, err = check(context.Background(), cfg, rt, rowsSource(rows),
		Options{Window: w, Before: before, After: after, SliceRows: sliceRows, MaxListed: 10, Readers: map[string]Reader{"main": &timedReader{}}})
	if err != nil || rep.Missing != n || len(rep.MissingEvents) != 10 || !rep.Truncated || rep.MissingEvents[9].EventID != "e9" {
		t.Errorf("MaxListed 10 over an empty broker: missing %d, listed %d, truncated %v (%v)", rep.Missing, len(rep.MissingEvents), rep.Truncated, err)
	}
}

// More rows than SliceRows sharing one created_at (a DATETIME without fraction at a high rate)
// cannot be split: the slice narrows to one microsecond, is read whole, and the run ends with
// every row checked.
func TestCheckSliceOfOneInstant(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var rows []row
	fr := &timedReader{}
	for i := range 1500 {
		id := fmt.Sprintf("s%d", i)
		rows = append(rows, outboxRow(id, "order.created", at))
		fr.recs = append(fr.recs, record{id, at})
	}
	rows = append(rows, outboxRow("late", "order.created", at.Add(30*time.Second)))
	fr.recs = append(fr.recs, record{"late", at.Add(30 * time.Second)})
	cfg := testConfig(t, config.OnPoisonStop)
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := check(context.Background(), cfg, rt, rowsSource(rows), Options{Window: Window{Since: at, Until: at.Add(time.Minute)},
		After: time.Second, SliceRows: 1000, Readers: map[string]Reader{"main": fr}})
	if err != nil || rep.Checked != 1501 || rep.Found != 1501 || fr.peakIDs != 1500 {
		t.Fatalf("checked %d found %d, peak %d ids (%v), want 1501, 1501, 1500", rep.Checked, rep.Found, fr.peakIDs, err)
	}
}

// genSource generates rate rows a second over the window without holding them, as a table
// would serve them; genRecords is the matching broker, each row's record stamped at its
// created_at.
type genSource struct {
	since time.Time
	step  time.Duration
	n     int
}

func (g genSource) index(t time.Time) int {
	if t.Before(g.since) {
		return 0
	}
	i := int((t.Sub(g.since) + g.step - 1) / g.step)
	return min(i, g.n)
}

func (g genSource) read(_ context.Context, since, until time.Time, limit int, fn func(row)) (bool, error) {
	lo, hi := g.index(since), g.index(until)
	if limit > 0 && hi-lo > limit {
		for i := lo; i <= lo+limit; i++ {
			fn(outboxRow("g"+strconv.Itoa(i), "order.created", g.since.Add(time.Duration(i)*g.step)))
		}
		return true, nil
	}
	for i := lo; i < hi; i++ {
		fn(outboxRow("g"+strconv.Itoa(i), "order.created", g.since.Add(time.Duration(i)*g.step)))
	}
	return false, nil
}

type genReader struct {
	g        genSource
	liveHeap uint64
}

func (r *genReader) Count(_ context.Context, _ string, from, to time.Time, counts map[string]int) error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.liveHeap = max(r.liveHeap, ms.HeapAlloc)
	for i := r.g.index(from); i < r.g.index(to); i++ {
		id := "g" + strconv.Itoa(i)
		if _, ok := counts[id]; ok {
			counts[id]++
		}
	}
	return nil
}

func (r *genReader) Close() error { return nil }

// The memory figure: the live heap at the fullest moment of a run (every Count is called with
// its slice loaded; the heap is measured after a GC there), for a 5-minute and a 20-minute
// window at 1,000 rows a second, with the default SliceRows, and for the 5-minute window read
// as one slice, as reconcile read before. Bounded, the longer window needs no more
// memory than the shorter.
func TestCheckMemoryFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 1.8 million generated rows")
	}
	cfg := testConfig(t, config.OnPoisonStop)
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	peak := func(window time.Duration, sliceRows int) uint64 {
		g := genSource{since: since, step: time.Millisecond, n: int(window / time.Millisecond)}
		rd := &genReader{g: g}
		rep, err := check(context.Background(), cfg, rt, g, Options{Window: Window{Since: since, Until: since.Add(window)},
			Before: time.Minute, After: time.Minute, SliceRows: sliceRows, Readers: map[string]Reader{"main": rd}})
		if err != nil || rep.Checked != g.n || rep.Found != g.n {
			t.Fatalf("window %s: checked %d found %d of %d (%v)", window, rep.Checked, rep.Found, g.n, err)
		}
		return rd.liveHeap
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	mb := func(b uint64) float64 { return float64(b-min(b, base)) / (1 << 20) }
	short, long := peak(5*time.Minute, 0), peak(20*time.Minute, 0)
	t.Logf("bounded (SliceRows %d): live heap above the test's own %.1f MB for 300,000 rows, %.1f MB for 1,200,000", DefaultSliceRows, mb(short), mb(long))
	// The window as one slice, as reconcile read it before (which also held every row's
	// columns until the end).
	g := genSource{since: since, step: time.Millisecond, n: int(5 * time.Minute / time.Millisecond)}
	whole := &genReader{g: g}
	s := newSlice(rt, nil)
	if _, err := g.read(context.Background(), since, since.Add(5*time.Minute), 0, s.add); err != nil {
		t.Fatal(err)
	}
	if _, err := s.evaluate(context.Background(), map[string]Reader{"main": whole}, since, since.Add(6*time.Minute), since.Add(6*time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Logf("one slice for the window (as before): %.1f MB for 300,000 rows", mb(whole.liveHeap))
	if mb(long) > 1.5*mb(short)+8 {
		t.Errorf("a window 4 times longer needs %.1f MB against %.1f MB: memory grows with the window", mb(long), mb(short))
	}
}
