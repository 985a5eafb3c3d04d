package metrics

import "testing"

// The alert OutboxdReconcileFailing reads failed runs in a row: each failed run adds one, a
// completed run (ok or missing) resets it; the runs counter keeps counting.
func TestReconcileConsecutiveFailedRuns(t *testing.T) {
	m := New(Options{Version: "1"})
	m.ReconcileFailedRun()
	m.ReconcileFailedRun()
	if got := value(t, gather(t, m), "outboxd_reconcile_consecutive_failed_runs"); got != 2 {
		t.Fatalf("after two failed runs: %v, want 2", got)
	}
	m.ReconcileRun(10, 1, 0)
	if got := value(t, gather(t, m), "outboxd_reconcile_consecutive_failed_runs"); got != 0 {
		t.Fatalf("after a completed run: %v, want 0", got)
	}
	m.ReconcileFailedRun()
	if got := value(t, gather(t, m), "outboxd_reconcile_consecutive_failed_runs"); got != 1 {
		t.Fatalf("after one more failed run: %v, want 1", got)
	}
}
