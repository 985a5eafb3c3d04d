package metrics

import (
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string) *dto.Histogram {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.Metric) != 1 || f.Metric[0].Histogram == nil {
		t.Fatalf("histogram %s missing", name)
	}
	return f.Metric[0].Histogram
}

// read→ack is observed for every acknowledged transaction; commit→ack only when the commit time
// is precise (MySQL 8), so whole-second MariaDB times never skew it.
func TestTxnAckedObservesCommitOnlyWhenPrecise(t *testing.T) {
	m := New(Options{})
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// Whole seconds (MariaDB): read 40 ms before the ack, commit "1 s" before by the clock.
	m.TxnAcked(base.Add(-40*time.Millisecond), base.Add(-time.Second), false, base)
	// Precise (MySQL 8): committed 1.7 ms before the ack, read 0.7 ms before it.
	m.TxnAcked(base.Add(-700*time.Microsecond), base.Add(-1700*time.Microsecond), true, base)
	fams := gather(t, m)

	ra := histogram(t, fams, "outboxd_read_to_ack_seconds")
	if ra.GetSampleCount() != 2 || abs(ra.GetSampleSum()-0.0407) > 1e-9 {
		t.Errorf("read_to_ack count %d sum %v, want 2 and 0.0407", ra.GetSampleCount(), ra.GetSampleSum())
	}
	ca := histogram(t, fams, "outboxd_commit_to_ack_seconds")
	if ca.GetSampleCount() != 1 || abs(ca.GetSampleSum()-0.0017) > 1e-9 {
		t.Errorf("commit_to_ack count %d sum %v, want 1 and 0.0017 (only the precise commit)", ca.GetSampleCount(), ca.GetSampleSum())
	}
	// 1.7 ms lies in (0.001, 0.0025].
	for _, b := range ca.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 0.0025 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("commit_to_ack le=%v has %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	// A clock that went backwards observes 0, not a negative latency.
	m.TxnAcked(base.Add(time.Second), base.Add(time.Second), true, base)
	if ca := histogram(t, gather(t, m), "outboxd_commit_to_ack_seconds"); ca.GetSampleCount() != 2 || abs(ca.GetSampleSum()-0.0017) > 1e-9 {
		t.Errorf("after a backwards clock: count %d sum %v", ca.GetSampleCount(), ca.GetSampleSum())
	}
}

func abs(x float64) float64 { return max(x, -x) }

// The send histogram's buckets are the round 1-2.5-5 steps, and the latency ones extend them.
func TestHistogramBucketsAreRound(t *testing.T) {
	m := New(Options{})
	m.SendDuration("main", time.Millisecond)
	fams := gather(t, m)
	var got []float64
	for _, b := range histogram(t, fams, "outboxd_send_duration_seconds").Bucket {
		got = append(got, b.GetUpperBound())
	}
	want := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	if !slices.Equal(got, want) {
		t.Errorf("send buckets %v, want %v", got, want)
	}
	got = got[:0]
	for _, b := range histogram(t, fams, "outboxd_read_to_ack_seconds").Bucket {
		got = append(got, b.GetUpperBound())
	}
	if !slices.Equal(got, append(want, 30, 60, 120, 300, 600)) {
		t.Errorf("latency buckets %v", got)
	}
}

// DeclareTable creates each table's series at 0 for its routes, dead letters under "none" and
// every route but the dead letters' own; InflightLimits and the reconnect counter read as set.
func TestDeclareTableAndLimits(t *testing.T) {
	m := New(Options{})
	m.DeclareTable("shop.outbox", []string{"orders", "1", RouteDeadLetter})
	m.InflightLimits(20000, 16<<20)
	m.SourceReconnect()
	fams := gather(t, m)
	labels := func(name string) []string {
		var out []string
		for _, mm := range fams[name].GetMetric() {
			s := ""
			for _, l := range mm.Label {
				s += l.GetName() + "=" + l.GetValue() + ","
			}
			if mm.Counter.GetValue() != 0 {
				t.Errorf("%s{%s} = %v at start", name, s, mm.Counter.GetValue())
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	if got, want := labels("outboxd_events_read_total"), []string{"table=shop.outbox,"}; !slices.Equal(got, want) {
		t.Errorf("events_read %v, want %v", got, want)
	}
	if got, want := labels("outboxd_table_events_delivered_total"), []string{
		"route=1,table=shop.outbox,", "route=dead_letter,table=shop.outbox,", "route=orders,table=shop.outbox,",
	}; !slices.Equal(got, want) {
		t.Errorf("table_events_delivered %v, want %v", got, want)
	}
	if got, want := labels("outboxd_table_dead_letters_total"), []string{
		"route=1,table=shop.outbox,", "route=none,table=shop.outbox,", "route=orders,table=shop.outbox,",
	}; !slices.Equal(got, want) {
		t.Errorf("table_dead_letters %v, want %v", got, want)
	}
	if v := value(t, fams, "outboxd_inflight_events_limit"); v != 20000 {
		t.Errorf("events limit %v", v)
	}
	if v := value(t, fams, "outboxd_inflight_bytes_limit"); v != 16<<20 {
		t.Errorf("bytes limit %v", v)
	}
	if v := value(t, fams, "outboxd_source_reconnects_total"); v != 1 {
		t.Errorf("reconnects %v", v)
	}
}
