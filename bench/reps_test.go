package main

import (
	"context"
	"strings"
	"testing"
)

// TestRotatedPutsEachRelayInEachPosition: with as many rounds as relays, every relay runs once
// in every position of a round, and the first measurement already taken is used, not rerun.
func TestRotatedPutsEachRelayInEachPosition(t *testing.T) {
	var order []string
	relay := func(name string) relayRun {
		return relayRun{run: func(_ context.Context, rep int) Workload {
			order = append(order, name)
			return Workload{Name: name, Events: rep}
		}}
	}
	first := Workload{Name: "a", Events: -1}
	runs := rotated(context.Background(), 3, &first, []relayRun{relay("a"), relay("b"), relay("c")})
	if got, want := strings.Join(order, ""), "bc"+"bca"+"cab"; got != want {
		t.Fatalf("run order %q, want %q (round 0's first run is the one given)", got, want)
	}
	for i, rs := range runs {
		if len(rs) != 3 {
			t.Fatalf("relay %d ran %d times, want 3", i, len(rs))
		}
	}
	if runs[0][0].Events != -1 {
		t.Fatalf("relay 0's first run is %+v, want the measurement given", runs[0][0])
	}
}

func TestMedianTakesTheMiddleRun(t *testing.T) {
	w := func(evs, cpu, rss float64) Workload {
		return Workload{Name: "x", EventsPerSec: fp(evs), CPUPer100k: fp(cpu), RSSPeakMiB: fp(rss)}
	}
	m := median([]Workload{w(300, 0.5, 10), w(100, 0.9, 30), w(200, 0.7, 20)})
	if *m.EventsPerSec != 200 || *m.CPUPer100k != 0.7 || *m.RSSPeakMiB != 30 {
		t.Fatalf("median = %v ev/s, %v CPU, %v RSS; want 200, 0.7 (median of all), 30 (highest)", *m.EventsPerSec, *m.CPUPer100k, *m.RSSPeakMiB)
	}
	// CPU is the median of all runs, not the median run's own.
	m = median([]Workload{w(300, 0.9, 10), w(100, 0.5, 10), w(200, 0.7, 10)})
	if *m.EventsPerSec != 200 || *m.CPUPer100k != 0.7 {
		t.Fatalf("median = %v ev/s, %v CPU; want 200 and 0.7", *m.EventsPerSec, *m.CPUPer100k)
	}
	if len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "median of 3 runs") {
		t.Fatalf("notes %q do not list the runs", m.Notes)
	}
	bad := w(0, 0, 0)
	bad.Error = "relay died"
	if m := median([]Workload{w(300, 0.5, 10), bad, w(200, 0.7, 20)}); m.Error != "relay died" {
		t.Fatalf("a failed run gave %+v, want the failure", m)
	}
}
