package pipeline

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/sink"
)

// histogramOf returns the sample count and sum of a histogram without labels.
func histogramOf(t *testing.T, m *metrics.Metrics, name string) (uint64, float64) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			h := f.Metric[0].Histogram
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0, 0
}

// A clock that stands still unless moved: the latencies observed are then exact.
type stillClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stillClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Through a whole pipeline: read→ack is observed once per transaction with rows (pieces and
// all), never for one without rows; commit→ack only for the transactions whose commit time is
// precise (MySQL 8), measured from that commit time.
func TestLatencyHistograms(t *testing.T) {
	base := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := &stillClock{now: base}
	m := metrics.New(metrics.Options{Now: clock.Now})
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": &memSink{}}, Saver: &memSaver{},
		Start: gtid.Empty(gtid.MariaDB), CheckpointInterval: time.Hour, Logger: zerolog.Nop(),
		Metrics: m, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	precise := txn(1, "a:1", "b:2")
	precise.CommitTime, precise.CommitTimePrecise = base.Add(-2*time.Second), true
	whole := txn(3, "a:3")
	whole.CommitTime = base.Add(-time.Second) // MariaDB: whole seconds, not observed
	piece1 := txn(4, "c:4")
	piece1.Partial, piece1.File, piece1.Pos = true, "", 0
	piece2 := txn(4, "c:5")
	for _, x := range []*binlog.Txn{piece1, piece2} {
		x.CommitTime, x.CommitTimePrecise = base.Add(-1500*time.Millisecond), true
	}
	if err := runAll(t, p, precise, txn(2), whole, piece1, piece2); err != nil {
		t.Fatal(err)
	}
	if n, sum := histogramOf(t, m, "outboxd_read_to_ack_seconds"); n != 3 || sum != 0 {
		t.Errorf("read_to_ack: %d observations summing %vs; want 3 (transactions 1, 3, 4, not the empty 2) summing 0", n, sum)
	}
	if n, sum := histogramOf(t, m, "outboxd_commit_to_ack_seconds"); n != 2 || sum != 3.5 {
		t.Errorf("commit_to_ack: %d observations summing %vs; want 2 (the precise 1 and 4) summing 3.5", n, sum)
	}
}

// The tracker observes a transaction when its last event is acknowledged, whether that ack comes
// before or after its last piece is recorded, exactly once, also for the transactions compact
// folds behind a head held open (a prepared XA), and never for one that sent nothing.
func TestTrackerObservesEachAcknowledgedTransactionOnce(t *testing.T) {
	tr := newTracker(gtid.Empty(gtid.MariaDB), 1<<30, 1<<30)
	seen := map[string]int{}
	tr.observe = func(e *entry) { seen[e.gtid]++ }
	now := time.Now()

	// Acked before its last piece is recorded.
	early := tr.begin("0-1-1", now, now)
	tr.extend(early, make([]item, 1))
	tr.ack([]item{{entry: early, size: 1}})
	if seen["0-1-1"] != 0 {
		t.Fatal("observed before its last piece arrived")
	}
	tr.finish(early, "f", 1)
	// Recorded first, acked later, in two acks.
	late := tr.begin("0-1-2", now, now)
	tr.extend(late, make([]item, 2))
	tr.finish(late, "f", 2)
	tr.ack([]item{{entry: late, size: 1}})
	if seen["0-1-2"] != 0 {
		t.Fatal("observed with an event still unacknowledged")
	}
	tr.ack([]item{{entry: late, size: 1}})
	// No rows: nothing to observe.
	tr.finish(tr.begin("0-1-3", now, now), "f", 3)

	// A head that stays open while many transactions behind it are acknowledged and compacted.
	head := tr.begin("0-1-4", now, now)
	tr.extend(head, make([]item, 1))
	const behind = 3 * minCompact
	for i := range behind {
		e := tr.begin(gtidN(5+i), now, now)
		tr.extend(e, make([]item, 1))
		tr.finish(e, "f", uint32(5+i))
		tr.ack([]item{{entry: e, size: 1}})
	}
	if len(tr.queue) >= behind {
		t.Fatalf("queue of %d was not compacted", len(tr.queue))
	}
	tr.finish(head, "f", 4)
	tr.ack([]item{{entry: head, size: 1}})
	if len(tr.queue) != 0 {
		t.Fatalf("%d entries left", len(tr.queue))
	}

	if len(seen) != behind+3 {
		t.Errorf("%d transactions observed, want %d", len(seen), behind+3)
	}
	for g, n := range seen {
		if n != 1 {
			t.Errorf("%s observed %d times", g, n)
		}
	}
	if seen["0-1-3"] != 0 {
		t.Error("the transaction without rows was observed")
	}
}

func gtidN(n int) string { return "0-1-" + strconv.Itoa(n) }
