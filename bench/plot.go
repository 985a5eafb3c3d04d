package main

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// nines maps a percentile to -log10(1-p/100), so 90, 99, 99.9 and 99.99 are evenly spaced and
// the tail gets as much room as the body (HdrHistogram's percentile plot).
func nines(p float64) float64 {
	if p >= 100 {
		return 4.5 // the maximum, drawn just right of 99.99
	}
	return -math.Log10(1 - p/100)
}

// plotLatency draws the percentile curves of the steady runs at rate into path (PNG). It fails
// when no run at that rate has latencies.
func plotLatency(path string, r *Results, rate int) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Commit → consumer latency at %d events/s (1-row transactions)", rate)
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{
		{Value: 0, Label: "0"}, {Value: nines(50), Label: "50"}, {Value: 1, Label: "90"}, {Value: 2, Label: "99"},
		{Value: 3, Label: "99.9"}, {Value: 4, Label: "99.99"}, {Value: 4.5, Label: "max"},
	})
	p.X.Min, p.X.Max = 0, 4.6
	// Bottom right stays empty: every curve rises to the right.
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -10
	p.Legend.YOffs = 10
	p.Add(plotter.NewGrid())

	var lines []any
	for _, id := range []string{"kafka", "kafka-eos", "poll-10ms", "poll-1s", "rocketmq"} {
		w := r.find(fmt.Sprintf("steady-%s-%d", id, rate))
		if w == nil || w.Latency == nil || len(w.Latency.Curve) == 0 {
			continue
		}
		xys := make(plotter.XYs, 0, len(w.Latency.Curve))
		for _, c := range w.Latency.Curve {
			// Log scales cannot show 0: draw anything under 10 µs (including messages that
			// arrived before COMMIT returned, counted as 0) at 10 µs.
			xys = append(xys, plotter.XY{X: nines(c.Percentile), Y: math.Max(c.MS, 0.01)})
		}
		label := w.System
		if id == "rocketmq" {
			label += " (until stored at the broker)"
		}
		lines = append(lines, label, xys)
	}
	if len(lines) == 0 {
		return fmt.Errorf("plot: no steady run at %d/s with latencies", rate)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: save %s: %w", path, err)
	}
	return nil
}
