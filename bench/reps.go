package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Why repetitions: on this shared 2-core machine one catch-up of a relay varies by up to 2× from
// run to run, and the order matters. Measured on the 100-row catch-up (1,000,000 rows, twice
// each): outboxd, run first right after the rows were written, reached 107k events/s; run again
// over the same rows after the two floor relays, 194k; the floors in between 199–227k. With
// one run each in a fixed order, the ratio outboxd/floor measured that order as much as the
// relays. So every relay of a comparison runs -reps times over the same rows, the order rotating
// by one each round (with -reps equal to the number of relays, each runs once in each
// position), and the tables show each relay's median run; the notes list every run.

// relayRun measures one relay over catch-up rows already written; rep numbers its runs from 0.
type relayRun struct {
	run func(ctx context.Context, rep int) Workload
}

// rotated runs every relay reps times, round r starting at relay r mod len(relays), and
// returns each relay's runs in relay order. first, when non-nil, is relay 0's measurement of
// round 0, taken already (the catch-up that wrote the rows).
func rotated(ctx context.Context, reps int, first *Workload, relays []relayRun) [][]Workload {
	out := make([][]Workload, len(relays))
	for r := range reps {
		for k := range relays {
			i := (r + k) % len(relays)
			if ctx.Err() != nil {
				return out
			}
			if r == 0 && i == 0 && first != nil {
				out[0] = append(out[0], *first)
				continue
			}
			out[i] = append(out[i], relays[i].run(ctx, r))
		}
	}
	return out
}

// median returns the run with the median events/s, with the median CPU per event of all runs,
// the highest peak RSS, and a note listing each run's figures. A failed run makes the result
// that failure: a relay that fails once is not measured by its good runs.
func median(runs []Workload) Workload {
	if len(runs) == 0 {
		return Workload{}
	}
	for _, w := range runs {
		if w.Error != "" || w.EventsPerSec == nil {
			return w
		}
	}
	if len(runs) == 1 {
		return runs[0]
	}
	byRate := slices.Clone(runs)
	slices.SortFunc(byRate, func(a, b Workload) int { return cmpFloat(*a.EventsPerSec, *b.EventsPerSec) })
	m := byRate[(len(byRate)-1)/2]
	m.Notes = slices.Clone(m.Notes)
	var cpus []float64
	var figs []string
	for _, w := range runs {
		figs = append(figs, fmt.Sprintf("%s ev/s %s CPU s/100k", num(w.EventsPerSec, 0), num(w.CPUPer100k, 2)))
		if w.CPUPer100k != nil {
			cpus = append(cpus, *w.CPUPer100k)
		}
		if w.RSSPeakMiB != nil && m.RSSPeakMiB != nil && *w.RSSPeakMiB > *m.RSSPeakMiB {
			m.RSSPeakMiB = fp(*w.RSSPeakMiB)
		}
	}
	if len(cpus) == len(runs) {
		slices.Sort(cpus)
		m.CPUPer100k = fp(cpus[(len(cpus)-1)/2])
	}
	m.Notes = append(m.Notes, fmt.Sprintf("median of %d runs in rotating order (events/s from the median run, CPU the median of all, RSS the highest): %s",
		len(runs), strings.Join(figs, "; ")))
	return m
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// outboxdOver measures outboxd over rows already in the binlog from pos0, to a fresh broker
// from newSink: a repetition of catchUp without writing the rows again.
func (h *harness) outboxdOver(ctx context.Context, s catchSpec, newSink func() (benchSink, error), pos0 string, rep int) Workload {
	w := Workload{ID: s.ID, Name: s.Name, Kind: s.Kind, Events: s.Rows, TxnRows: s.TxnRows}
	sink, err := newSink()
	if err != nil {
		w.Error = err.Error()
		return w
	}
	defer sink.close()
	w.System = "outboxd-" + sink.kind()
	logf("%s: run %d over the same rows", s.Name, rep+1)
	h.measureCatchUp(ctx, &w, sink, func() (*outboxdProc, error) {
		return startOutboxd(h.bin, relayConfig{
			Addr: h.srv.Addr, ServerID: h.serverID(), Start: pos0, Table: outboxTable.String(),
			Sink: sink.sinkYAML(), Topic: sink.topic(), Dir: filepath.Join(h.tmp, fmt.Sprintf("%s-%d", s.ID, rep)), Extra: h.o.OutboxdExtra,
			CheckpointInterval: s.CheckpointInterval, Delivery: deliveryOf(sink, s.CheckpointInterval),
		})
	})
	return w
}
