package metrics

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outboxd/outboxd/gtid"
)

// A nil *Metrics must accept every call: components and their tests run without a registry.
func TestNilMetricsIsNoOp(t *testing.T) {
	var m *Metrics
	m.SourceConnected(true, nil)
	m.SourceConnected(false, errors.New("x"))
	m.BinlogEvent(10)
	m.Heartbeat()
	m.TxnRead(time.Now())
	m.SetPipeline(nil)
	m.EventsRead("s", "t", 3)
	m.Delivered("k", "0", 1)
	m.Failed("k", "0", KindTransient, 1)
	m.DeadLettered(ReasonNoRoute)
	m.SendDuration("k", time.Millisecond)
	m.Retry("k")
	m.SinkResult("k", nil)
	m.CheckpointSaved(time.Now(), time.Now())
	m.CheckpointLoaded(time.Now(), time.Now())
	m.CheckpointSaveFailed()
	m.SetBehind(Behind{Transactions: 3})
	m.DeclareSink("k", []string{"0"})
	m.DeclareTable("s.t", []string{"0"})
	m.InflightLimits(1, 2)
	m.SourceReconnect()
	m.TableDelivered("s.t", "0", 1)
	m.TableDeadLettered("s.t", RouteNone)
	m.TxnAcked(time.Now(), time.Now(), true, time.Now())
	m.SetBinlogRetention(time.Hour)
	m.SetOldestBinlog(time.Now())
	m.SetCleanupStopped("replica")
	if m.RetentionRemaining() != 0 {
		t.Fatal("nil Metrics reports a retention")
	}
	if m.Registry() != nil || m.Sinks() != nil || m.Lag() != (LagResult{}) || m.LastBehind().Transactions != -1 {
		t.Fatal("nil Metrics returned state")
	}
	if up, _ := m.Source(); up {
		t.Fatal("nil Metrics reports a connected source")
	}
}

// fakePipe is a pipeline view with a fixed oldest transaction.
type fakePipe struct {
	commit, read time.Time
	ok           bool
	events       int
}

func (f *fakePipe) Oldest() (time.Time, time.Time, bool) { return f.commit, f.read, f.ok }
func (f *fakePipe) InFlight() (int, int)                 { return f.events, f.events * 10 }

func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.Metric) == 0 {
		t.Fatalf("metric %s missing", name)
	}
	m := f.Metric[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("metric %s is neither gauge nor counter", name)
	return 0
}

// Every name of the metrics contract is registered with its type (labelled families appear once
// a child exists, so each gets one here).
func TestEveryContractMetricIsRegistered(t *testing.T) {
	m := New(Options{Version: "1.2.3"})
	m.EventsRead("shop", "outbox_event", 1)
	m.Delivered("main", "0", 1)
	m.Failed("main", "0", KindTransient, 1)
	m.DeadLettered(ReasonMalformed)
	m.SendDuration("main", time.Millisecond)
	m.Retry("main")
	m.SinkResult("main", nil)
	m.DeclareTable("shop.outbox_event", []string{"0"})
	m.DeclareCleanupTable("shop.outbox_event")
	m.SetCleanupOldest("shop.outbox_event", time.Second)
	fams := gather(t, m)
	want := map[string]dto.MetricType{
		"outboxd_source_reconnects_total":             dto.MetricType_COUNTER,
		"outboxd_leader":                              dto.MetricType_GAUGE,
		"outboxd_leader_epoch":                        dto.MetricType_GAUGE,
		"outboxd_fences_total":                        dto.MetricType_COUNTER,
		"outboxd_missing_transactions_total":          dto.MetricType_COUNTER,
		"outboxd_inflight_events_limit":               dto.MetricType_GAUGE,
		"outboxd_inflight_bytes_limit":                dto.MetricType_GAUGE,
		"outboxd_read_to_ack_seconds":                 dto.MetricType_HISTOGRAM,
		"outboxd_commit_to_ack_seconds":               dto.MetricType_HISTOGRAM,
		"outboxd_table_events_delivered_total":        dto.MetricType_COUNTER,
		"outboxd_table_dead_letters_total":            dto.MetricType_COUNTER,
		"outboxd_binlog_events_read_total":            dto.MetricType_COUNTER,
		"outboxd_binlog_bytes_read_total":             dto.MetricType_COUNTER,
		"outboxd_events_read_total":                   dto.MetricType_COUNTER,
		"outboxd_events_delivered_total":              dto.MetricType_COUNTER,
		"outboxd_events_failed_total":                 dto.MetricType_COUNTER,
		"outboxd_dead_letters_total":                  dto.MetricType_COUNTER,
		"outboxd_send_duration_seconds":               dto.MetricType_HISTOGRAM,
		"outboxd_send_retries_total":                  dto.MetricType_COUNTER,
		"outboxd_inflight_events":                     dto.MetricType_GAUGE,
		"outboxd_inflight_bytes":                      dto.MetricType_GAUGE,
		"outboxd_lag_seconds":                         dto.MetricType_GAUGE,
		"outboxd_oldest_unacked_event_age_seconds":    dto.MetricType_GAUGE,
		"outboxd_checkpoint_age_seconds":              dto.MetricType_GAUGE,
		"outboxd_xa_prepared_transactions":            dto.MetricType_GAUGE,
		"outboxd_xa_oldest_prepared_age_seconds":      dto.MetricType_GAUGE,
		"outboxd_binlog_retention_seconds":            dto.MetricType_GAUGE,
		"outboxd_source_clock_offset_seconds":         dto.MetricType_GAUGE,
		"outboxd_binlog_oldest_age_seconds":           dto.MetricType_GAUGE,
		"outboxd_binlog_retention_remaining_seconds":  dto.MetricType_GAUGE,
		"outboxd_checkpoint_saves_total":              dto.MetricType_COUNTER,
		"outboxd_checkpoint_save_failures_total":      dto.MetricType_COUNTER,
		"outboxd_checkpoint_commit_timestamp_seconds": dto.MetricType_GAUGE,
		"outboxd_source_connected":                    dto.MetricType_GAUGE,
		"outboxd_heartbeats_received_total":           dto.MetricType_COUNTER,
		"outboxd_transactions_skipped_total":          dto.MetricType_COUNTER,
		"outboxd_outbox_updates_total":                dto.MetricType_COUNTER,
		"outboxd_sink_up":                             dto.MetricType_GAUGE,
		"outboxd_transactions_behind":                 dto.MetricType_GAUGE,
		"outboxd_build_info":                          dto.MetricType_GAUGE,
		"outboxd_reconcile_missing_events":            dto.MetricType_GAUGE,
		"outboxd_reconcile_duplicated_events":         dto.MetricType_GAUGE,
		"outboxd_reconcile_checked_events_total":      dto.MetricType_COUNTER,
		"outboxd_reconcile_runs_total":                dto.MetricType_COUNTER,
		"outboxd_reconcile_consecutive_failed_runs":   dto.MetricType_GAUGE,
		"outboxd_reconcile_null_created_at_rows":      dto.MetricType_GAUGE,
		"outboxd_cleanup_rows_deleted_total":          dto.MetricType_COUNTER,
		"outboxd_cleanup_batches_total":               dto.MetricType_COUNTER,
		"outboxd_cleanup_errors_total":                dto.MetricType_COUNTER,
		"outboxd_cleanup_keys_dropped_total":          dto.MetricType_COUNTER,
		"outboxd_cleanup_oldest_row_age_seconds":      dto.MetricType_GAUGE,
		"go_goroutines":                               dto.MetricType_GAUGE,
		"process_cpu_seconds_total":                   dto.MetricType_COUNTER,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s is not registered", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is %s, want %s", name, f.GetType(), typ)
		}
	}
	var extra []string
	for name := range fams {
		if _, ok := want[name]; !ok && strings.HasPrefix(name, "outboxd_") {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("metrics outside the contract: %v", extra)
	}
	bi := fams["outboxd_build_info"].Metric[0]
	labels := map[string]string{}
	for _, l := range bi.Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "1.2.3" || !strings.HasPrefix(labels["goversion"], "go") || bi.Gauge.GetValue() != 1 {
		t.Errorf("build_info = %v %v", labels, bi.Gauge.GetValue())
	}
	for _, l := range fams["outboxd_events_read_total"].Metric[0].Label {
		if l.GetName() == "table" && l.GetValue() != "shop.outbox_event" {
			t.Errorf("table label = %q", l.GetValue())
		}
	}
}

// The lag gauges are computed at scrape time from timestamps: with the pipeline stuck they grow
// between two scrapes even though nothing new happened.
func TestLagGrowsWhileStuckWithInjectedClock(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	m := New(Options{Now: func() time.Time { return now }, HeartbeatPeriod: time.Second})
	p := &fakePipe{commit: now.Add(-3 * time.Second), read: now.Add(-2 * time.Second), ok: true, events: 4}
	m.SetPipeline(p)
	fams := gather(t, m)
	if v := value(t, fams, "outboxd_lag_seconds"); v != 3 {
		t.Fatalf("lag = %v, want 3", v)
	}
	if v := value(t, fams, "outboxd_oldest_unacked_event_age_seconds"); v != 2 {
		t.Fatalf("oldest age = %v, want 2", v)
	}
	if v := value(t, fams, "outboxd_inflight_events"); v != 4 {
		t.Fatalf("inflight events = %v", v)
	}
	now = now.Add(10 * time.Second)
	fams = gather(t, m)
	if v := value(t, fams, "outboxd_lag_seconds"); v != 13 {
		t.Fatalf("lag after 10s stuck = %v, want 13", v)
	}
	if v := value(t, fams, "outboxd_oldest_unacked_event_age_seconds"); v != 12 {
		t.Fatalf("oldest age after 10s = %v, want 12", v)
	}

	// Everything acknowledged, then a heartbeat: caught up.
	p.ok = false
	m.TxnRead(now.Add(-1 * time.Second))
	if got := m.Lag(); got.Lag != time.Second || got.CaughtUp {
		t.Fatalf("after a txn without heartbeat: %+v, want lag 1s", got)
	}
	m.Heartbeat()
	if got := m.Lag(); got.Lag != 0 || !got.CaughtUp {
		t.Fatalf("after heartbeat: %+v, want caught up", got)
	}
	// Heartbeats stop (connection stalled): after the grace the lag counts from the last one.
	now = now.Add(2 * time.Second)
	if got := m.Lag(); got.Lag != 0 {
		t.Fatalf("within grace: %+v", got)
	}
	now = now.Add(8 * time.Second)
	if got := m.Lag(); got.Lag != 10*time.Second || got.CaughtUp {
		t.Fatalf("heartbeats stopped 10s ago: %+v, want lag 10s", got)
	}

	// Checkpoint age and commit timestamp.
	m.CheckpointSaved(now.Add(-4*time.Second), time.Unix(1700000000, 500_000_000))
	fams = gather(t, m)
	if v := value(t, fams, "outboxd_checkpoint_age_seconds"); v != 4 {
		t.Fatalf("checkpoint age = %v", v)
	}
	if v := value(t, fams, "outboxd_checkpoint_commit_timestamp_seconds"); v != 1700000000.5 {
		t.Fatalf("checkpoint commit ts = %v", v)
	}
	if v := value(t, fams, "outboxd_checkpoint_saves_total"); v != 1 {
		t.Fatalf("saves = %v", v)
	}
	if v := value(t, fams, "outboxd_checkpoint_save_failures_total"); v != 0 {
		t.Fatalf("save failures before any = %v, want the series at 0", v)
	}
	m.CheckpointSaveFailed()
	if v := value(t, gather(t, m), "outboxd_checkpoint_save_failures_total"); v != 1 {
		t.Fatalf("save failures = %v, want 1", v)
	}
}

func TestComputeLagRules(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		name string
		in   LagInput
		want LagResult
	}{
		{"nothing yet", LagInput{Now: now, HeartbeatPeriod: time.Second}, LagResult{}},
		{"pending", LagInput{Now: now, Pending: true, OldestCommit: now.Add(-5 * time.Second), OldestRead: now.Add(-time.Second),
			ReadSeq: 3, HeartbeatSeq: 3, LastHeartbeat: now, HeartbeatPeriod: time.Second},
			LagResult{Lag: 5 * time.Second, OldestUnacked: time.Second}},
		{"busy, no heartbeat since newest", LagInput{Now: now, NewestCommit: now.Add(-700 * time.Millisecond), ReadSeq: 9, HeartbeatSeq: 2,
			LastHeartbeat: now.Add(-time.Minute), HeartbeatPeriod: time.Second}, LagResult{Lag: 700 * time.Millisecond}},
		{"heartbeat after newest", LagInput{Now: now, NewestCommit: now.Add(-time.Hour), ReadSeq: 9, HeartbeatSeq: 9,
			LastHeartbeat: now.Add(-time.Second), HeartbeatPeriod: time.Second}, LagResult{CaughtUp: true}},
		{"clock skew: commit in the future", LagInput{Now: now, Pending: true, OldestCommit: now.Add(time.Second), OldestRead: now},
			LagResult{}},
		// The source's clock two days behind this host's (its commit times with it): the offset
		// puts now on its clock, so 3 s behind is 3 s, not two days; ahead, real lag shows.
		{"source clock behind, pending", LagInput{Now: now, SourceOffset: -48 * time.Hour, Pending: true,
			OldestCommit: now.Add(-48*time.Hour - 3*time.Second), OldestRead: now.Add(-time.Second)},
			LagResult{Lag: 3 * time.Second, OldestUnacked: time.Second}},
		{"source clock behind, busy", LagInput{Now: now, SourceOffset: -48 * time.Hour, NewestCommit: now.Add(-48*time.Hour - 2*time.Second),
			ReadSeq: 9, HeartbeatSeq: 2, LastHeartbeat: now.Add(-time.Minute), HeartbeatPeriod: time.Second}, LagResult{Lag: 2 * time.Second}},
		{"source clock ahead, pending", LagInput{Now: now, SourceOffset: 48 * time.Hour, Pending: true,
			OldestCommit: now.Add(48*time.Hour - 4*time.Second), OldestRead: now.Add(-time.Second)},
			LagResult{Lag: 4 * time.Second, OldestUnacked: time.Second}},
	}
	for _, c := range cases {
		if got := ComputeLag(c.in); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestSinkResultAndSource(t *testing.T) {
	m := New(Options{})
	m.SinkResult("main", errors.New("dial tcp: refused"))
	st := m.Sinks()["main"]
	if st.Up || st.Error != "dial tcp: refused" {
		t.Fatalf("state = %+v", st)
	}
	if v := value(t, gather(t, m), "outboxd_sink_up"); v != 0 {
		t.Fatalf("sink_up = %v", v)
	}
	m.SinkResult("main", nil)
	if v := value(t, gather(t, m), "outboxd_sink_up"); v != 1 || !m.Sinks()["main"].Up {
		t.Fatalf("sink_up = %v", v)
	}
	m.SourceConnected(false, errors.New("connection refused"))
	if up, why := m.Source(); up || why != "connection refused" {
		t.Fatalf("source = %v %q", up, why)
	}
	m.SourceConnected(true, nil)
	if up, why := m.Source(); !up || why != "" || value(t, gather(t, m), "outboxd_source_connected") != 1 {
		t.Fatalf("source = %v %q", up, why)
	}
}

func TestCountBehind(t *testing.T) {
	mustParse := func(f gtid.Flavor, s string) gtid.Set {
		t.Helper()
		g, err := gtid.Parse(f, s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	cases := []struct {
		f             gtid.Flavor
		server, acked string
		want          int64
	}{
		{gtid.MariaDB, "0-1-100,1-2-7", "0-1-90,1-2-7", 10},
		{gtid.MariaDB, "0-1-100,10-2-7", "0-1-100", 7},
		{gtid.MariaDB, "0-1-100", "0-1-100", 0},
		{gtid.MariaDB, "0-1-100", "0-1-120", 0},
		{gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-60", 40},
		{gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:200-209", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-50:52-100", 11},
		{gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-3", "", 8},
	}
	for _, c := range cases {
		got, err := CountBehind(mustParse(c.f, c.server), mustParse(c.f, c.acked))
		if err != nil {
			t.Fatalf("%s - %s: %v", c.server, c.acked, err)
		}
		if got != c.want {
			t.Errorf("%s - %s = %d, want %d", c.server, c.acked, got, c.want)
		}
	}
	if _, err := CountBehind(gtid.Empty(gtid.MySQL), gtid.Empty(gtid.MariaDB)); err == nil {
		t.Error("mixed flavors accepted")
	}
}

type fakeXAPipe struct {
	fakePipe
	n      int
	oldest time.Time
}

func (f *fakeXAPipe) PreparedXA() (int, time.Time) { return f.n, f.oldest }

// The XA age is computed at scrape time, so it grows while the XA stays prepared, and is 0
// (present, not absent) when none is prepared or the pipeline does not hold XA transactions.
func TestPreparedXAGauges(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	m := New(Options{Now: func() time.Time { return now }})
	if v := value(t, gather(t, m), "outboxd_xa_oldest_prepared_age_seconds"); v != 0 {
		t.Fatalf("age without pipeline = %v", v)
	}
	m.SetPipeline(&fakePipe{})
	if v := value(t, gather(t, m), "outboxd_xa_prepared_transactions"); v != 0 {
		t.Fatalf("count for a pipeline without XA = %v", v)
	}
	p := &fakeXAPipe{}
	m.SetPipeline(p)
	if v := value(t, gather(t, m), "outboxd_xa_oldest_prepared_age_seconds"); v != 0 {
		t.Fatalf("age with none prepared = %v", v)
	}
	p.n, p.oldest = 2, now.Add(-30*time.Second)
	fams := gather(t, m)
	if v := value(t, fams, "outboxd_xa_oldest_prepared_age_seconds"); v != 30 {
		t.Fatalf("age = %v, want 30", v)
	}
	if v := value(t, fams, "outboxd_xa_prepared_transactions"); v != 2 {
		t.Fatalf("count = %v, want 2", v)
	}
	now = now.Add(time.Minute)
	if v := value(t, gather(t, m), "outboxd_xa_oldest_prepared_age_seconds"); v != 90 {
		t.Fatalf("age a minute later = %v, want 90", v)
	}
}
