package main

import (
	"strings"
	"testing"
)

// The issue-24 targets are checked from the run's figures: a miss shows as one, with its ratio.
func TestIssue24TargetsFromTheRun(t *testing.T) {
	w := func(id string, eps, cpu float64) Workload {
		return Workload{ID: id, EventsPerSec: fp(eps), CPUPer100k: fp(cpu)}
	}
	steady := func(id string, p99 float64) Workload {
		return Workload{ID: id, Kind: "steady", Latency: &LatencyStats{P99MS: p99, P50MS: 1}}
	}
	r := &Results{Params: Params{TxnSizes: []int{1, 100}, Rates: []int{3000}}, Workloads: []Workload{
		w("catchup-kafka-txn1", 80000, 1.5), w(eosCatchUpID(1), 40000, 2.0), w(noIdemCatchUpID(1), 80000, 1.5),
		w("catchup-kafka-txn100", 200000, 0.5), w(eosCatchUpID(100), 180000, 0.5), w(noIdemCatchUpID(100), 250000, 0.4),
		steady("steady-kafka-3000", 4), steady("steady-kafka-eos-3000", 6),
	}}
	r.computeRatios()
	wantTargets(t, r,
		"| Exactly-once catch-up ≥ 0.7 × at-least-once events/s, 1-row txns | 0.50 | **no** |",
		"| Exactly-once catch-up ≥ 0.7 × at-least-once events/s, 100-row txns | 0.90 | yes |",
		"| Exactly-once p99 at 3000/s ≤ 2 × at-least-once's | 1.50× | yes |",
		"| Idempotent at-least-once catch-up ≥ 0.95 × idempotent: false events/s, 1-row txns | 1.00 | yes |",
		"| Idempotent at-least-once catch-up ≥ 0.95 × idempotent: false events/s, 100-row txns | 0.80 | **no** |",
	)
}

// wantTargets fails t unless r's targets table has every line.
func wantTargets(t *testing.T, r *Results, lines ...string) {
	t.Helper()
	var b strings.Builder
	r.targetsMarkdown(&b)
	md := b.String()
	for _, line := range lines {
		if !strings.Contains(md, line) {
			t.Errorf("targets table lacks %q:\n%s", line, md)
		}
	}
}
