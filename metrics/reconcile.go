package metrics

import "github.com/prometheus/client_golang/prometheus"

// Results of a periodic reconcile run (the result label of outboxd_reconcile_runs_total).
const (
	ReconcileOK      = "ok"      // every row of the window was found
	ReconcileMissing = "missing" // some were not
	ReconcileFailed  = "failed"  // the run could not complete (a query or broker read failed)
)

// reconcileMetrics are the periodic reconciliation's series (config reconcile).
type reconcileMetrics struct {
	missing    prometheus.Gauge
	duplicated prometheus.Gauge
	checked    prometheus.Counter
	runs       *prometheus.CounterVec
	// failedInARow is the failed runs since the last completed one: the alert's signal, which
	// the runs counter gives only with the interval known.
	failedInARow prometheus.Gauge
	// nullCreatedAt is the rows no window holds, so no run checks.
	nullCreatedAt prometheus.Gauge
}

func newReconcileMetrics() reconcileMetrics {
	r := reconcileMetrics{
		missing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_reconcile_missing_events",
			Help: "Outbox rows of the last completed periodic reconcile window whose event_id was not found at the destination their route gives (reconcile.out lists them); 0 before the first run."}),
		duplicated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_reconcile_duplicated_events",
			Help: "Event ids of the last completed periodic reconcile window found more than once at their destination (at-least-once resends)."}),
		checked: prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_reconcile_checked_events_total",
			Help: "Outbox rows checked by periodic reconcile runs."}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_reconcile_runs_total",
			Help: "Periodic reconcile runs, by result: ok, missing, failed."}, []string{"result"}),
		failedInARow: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_reconcile_consecutive_failed_runs",
			Help: "Periodic reconcile runs that could not complete since the last one that did (0 after a completed run)."}),
		nullCreatedAt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_reconcile_null_created_at_rows",
			Help: "Outbox rows with a NULL created_at at the last periodic reconcile run: no window holds them, so they are never checked."}),
	}
	for _, res := range []string{ReconcileOK, ReconcileMissing, ReconcileFailed} {
		r.runs.WithLabelValues(res)
	}
	return r
}

func (r reconcileMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.missing, r.duplicated, r.checked, r.runs, r.failedInARow, r.nullCreatedAt}
}

// ReconcileRun records a completed periodic reconcile run: how many rows it checked, how many
// were missing and how many found more than once. Safe for concurrent use; nil-safe.
func (m *Metrics) ReconcileRun(checked, missing, duplicated int) {
	if m == nil {
		return
	}
	m.rec.checked.Add(float64(checked))
	m.rec.missing.Set(float64(missing))
	m.rec.duplicated.Set(float64(duplicated))
	res := ReconcileOK
	if missing > 0 {
		res = ReconcileMissing
	}
	m.rec.runs.WithLabelValues(res).Inc()
	m.rec.failedInARow.Set(0)
}

// ReconcileFailedRun records a periodic reconcile run that could not complete; the gauges keep
// the last completed run's values. Nil-safe.
func (m *Metrics) ReconcileFailedRun() {
	if m == nil {
		return
	}
	m.rec.runs.WithLabelValues(ReconcileFailed).Inc()
	m.rec.failedInARow.Inc()
}

// ReconcileNullCreatedAt records the rows with a NULL created_at a periodic run counted.
// Nil-safe.
func (m *Metrics) ReconcileNullCreatedAt(n int) {
	if m == nil {
		return
	}
	m.rec.nullCreatedAt.Set(float64(n))
}
