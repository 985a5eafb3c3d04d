package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// cleanupMetrics are the series of package cleanup, by outbox table.
type cleanupMetrics struct {
	deleted, batches, errors, dropped *prometheus.CounterVec
	oldest, unproven, stopped         *prometheus.GaugeVec
}

func newCleanupMetrics(reg *prometheus.Registry) *cleanupMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"table"})
	}
	c := &cleanupMetrics{
		deleted: vec("outboxd_cleanup_rows_deleted_total", "Delivered outbox rows cleanup deleted, by table (schema.table)."),
		batches: vec("outboxd_cleanup_batches_total", "DELETE statements cleanup ran (each its own transaction of at most cleanup.batch rows), by table."),
		errors:  vec("outboxd_cleanup_errors_total", "Cleanup statements that failed (retried at the next round; nothing is lost, rows only stay longer), by table."),
		dropped: vec("outboxd_cleanup_keys_dropped_total", "Primary keys of delivered rows not queued for deletion because the queue was full (retention 0); their rows are left to the created_at sweep, or stay, by table."),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outboxd_cleanup_oldest_row_age_seconds",
			Help: "Now minus the created_at of the row first in primary-key order left in the table (dead-lettered rows included), sampled every cleanup.interval; only for tables with columns.created_at, 0 when the table is empty.",
		}, []string{"table"}),
		unproven: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outboxd_cleanup_unproven_rows",
			Help: "Rows the created_at sweep looked at and kept because their event was not found at the topic their route gives (never relayed, dead-lettered, or no longer on the broker), by table; set by each full pass, raised by the rounds between. Run outboxd reconcile for their event ids.",
		}, []string{"table"}),
		stopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outboxd_cleanup_stopped",
			Help: "1 once cleanup stopped because its writer (checkpoint.writer_addr) is no writable primary any more, by reason (read_only, replica, unverified); it stays stopped until outboxd restarts. The relay goes on.",
		}, []string{"reason"}),
	}
	reg.MustRegister(c.deleted, c.batches, c.errors, c.dropped, c.oldest, c.unproven, c.stopped)
	return c
}

// DeclareCleanupTable creates the cleanup series of table at 0, so rate() and increase() see
// their first increment.
func (m *Metrics) DeclareCleanupTable(table string) {
	if m == nil {
		return
	}
	c := m.cleanup
	c.deleted.WithLabelValues(table)
	c.batches.WithLabelValues(table)
	c.errors.WithLabelValues(table)
	c.dropped.WithLabelValues(table)
}

// CleanupDeleted counts one DELETE of rows rows in table.
func (m *Metrics) CleanupDeleted(table string, rows int) {
	if m == nil {
		return
	}
	m.cleanup.batches.WithLabelValues(table).Inc()
	m.cleanup.deleted.WithLabelValues(table).Add(float64(rows))
}

// CleanupFailed counts one failed cleanup statement on table.
func (m *Metrics) CleanupFailed(table string) {
	if m == nil {
		return
	}
	m.cleanup.errors.WithLabelValues(table).Inc()
}

// CleanupDropped counts n keys of table not queued (the queue was full).
func (m *Metrics) CleanupDropped(table string, n int) {
	if m == nil {
		return
	}
	m.cleanup.dropped.WithLabelValues(table).Add(float64(n))
}

// SetCleanupOldest records the age of the oldest row left in table.
func (m *Metrics) SetCleanupOldest(table string, age time.Duration) {
	if m == nil {
		return
	}
	m.cleanup.oldest.WithLabelValues(table).Set(max(0, age).Seconds())
}

// SetCleanupUnproven records how many rows of table the sweep kept without proof of delivery.
func (m *Metrics) SetCleanupUnproven(table string, rows int) {
	if m == nil {
		return
	}
	m.cleanup.unproven.WithLabelValues(table).Set(float64(rows))
}

// SetCleanupStopped records that cleanup stopped for reason (the writer is no primary).
func (m *Metrics) SetCleanupStopped(reason string) {
	if m == nil {
		return
	}
	m.cleanup.stopped.WithLabelValues(reason).Set(1)
}
