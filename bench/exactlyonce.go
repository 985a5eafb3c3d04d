package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/gtid"
)

// Exactly-once rows (issue 24): outboxd with `delivery: exactly_once` and the Kafka checkpoint
// store, measured beside the at-least-once relay in the same rotation, and an at-least-once
// relay with `idempotent: false` (the sink as it was before idempotence became the default).

// eosCheckpointTopic is checkpoint.topic of the exactly-once runs: compacted, one partition,
// created on each fresh broker as `outboxd check` would.
const eosCheckpointTopic = "outboxd_checkpoints"

// deliverer is a sink whose outboxd runs in another delivery mode than the default.
type deliverer interface {
	// deliveryYAML is the top-level delivery and checkpoint YAML, the checkpoint saved (here:
	// a Kafka transaction committed) at least every interval.
	deliveryYAML(interval string) string
}

// deliveryOf is relayConfig.Delivery for sink: "" for the default (at-least-once, file store).
func deliveryOf(sink benchSink, interval string) string {
	d, ok := sink.(deliverer)
	if !ok {
		return ""
	}
	if interval == "" {
		interval = "1s"
	}
	return d.deliveryYAML(interval)
}

// eosSink is a fresh kfake broker that outboxd writes to in exactly-once mode.
//
// Its catch-up ends when every event is visible to a read_committed consumer. The topic's end
// offsets cannot tell that: every Kafka transaction also writes a commit marker into each
// partition it touched, which takes an offset of its own, and an open transaction's records
// count before they are committed. So the clock stops when a read_committed consumer of the
// checkpoint topic first receives a checkpoint that covers the last row's GTID: that record is
// committed in the same transaction as the last events, so they became visible in the same
// instant. (The end offsets, markers included, are then checked to hold at least the rows.)
type eosSink struct {
	*kafkaSink
	// last is the GTID position after the catch-up's rows; "" for a steady run.
	last string
}

func newEOSSink(topic, last string) (*eosSink, error) {
	ks, err := newKafkaSink(topic)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(ks.c.addrs...))
	if err != nil {
		ks.close()
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, eosCheckpointTopic); err != nil {
		ks.close()
		return nil, fmt.Errorf("create %s: %w", eosCheckpointTopic, err)
	}
	return &eosSink{kafkaSink: ks, last: last}, nil
}

func (e *eosSink) kind() string { return "kafka-eos" }

func (e *eosSink) deliveryYAML(interval string) string {
	return fmt.Sprintf("delivery: exactly_once\ncheckpoint: {store: kafka, name: bench, sink: out, topic: %s, interval: %s}\n", eosCheckpointTopic, interval)
}

func (e *eosSink) waitCount(ctx context.Context, n int64, check func() error) (time.Time, error) {
	if e.last == "" {
		return time.Time{}, errors.New("exactly-once catch-up: no last GTID to wait for")
	}
	target, err := gtid.Parse(gtid.MariaDB, e.last)
	if err != nil {
		return time.Time{}, fmt.Errorf("exactly-once catch-up: %w", err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.c.addrs...),
		kgo.ConsumeTopics(eosCheckpointTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond), // kfake answers a read_committed fetch at the commit
	)
	if err != nil {
		return time.Time{}, err
	}
	defer cl.Close()
	var seen string
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		now := time.Now()
		cancel()
		covered := false
		fs.EachRecord(func(r *kgo.Record) {
			var c struct {
				GTIDSet string `json:"gtid_set"`
			}
			if json.Unmarshal(r.Value, &c) != nil {
				return
			}
			seen = c.GTIDSet
			if s, err := gtid.Parse(gtid.MariaDB, c.GTIDSet); err == nil && s.Contains(target) {
				covered = true
			}
		})
		if covered {
			have, err := endOffsets(ctx, kadm.NewClient(cl), e.t)
			if err != nil {
				return time.Time{}, err
			}
			if have < n {
				return time.Time{}, fmt.Errorf("the checkpoint covers %s but %s holds %d offsets (commit markers included) for %d rows", e.last, e.t, have, n)
			}
			return now, nil
		}
		if check != nil {
			if err := check(); err != nil {
				return time.Time{}, fmt.Errorf("committed checkpoint %q, waiting for %s: %w", seen, e.last, err)
			}
		}
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("committed checkpoint %q, waiting for %s: %w", seen, e.last, ctx.Err())
		}
	}
}

// newNoIdemSink is a fresh kfake broker that outboxd's at-least-once sink writes to with
// `idempotent: false`.
func newNoIdemSink(topic string) (*kafkaSink, error) {
	ks, err := newKafkaSink(topic)
	if err != nil {
		return nil, err
	}
	ks.noIdem = true
	return ks, nil
}

// issue24Relays are the catch-up's exactly-once and non-idempotent outboxd runs over the rows
// spec wrote from pos0, to join the at-least-once relay's rotation.
func (h *harness) issue24Relays(ctx context.Context, spec catchSpec, pos0 string) []relayRun {
	// Nothing writes to MariaDB between the rows and now: this is the last row's position.
	last, err := gtidPos(ctx, h.root)
	eos := spec
	eos.ID, eos.Name = eosCatchUpID(spec.TxnRows), fmt.Sprintf("outboxd → Kafka exactly-once catch-up, %d-row txns", spec.TxnRows)
	noIdem := spec
	noIdem.ID, noIdem.Name = noIdemCatchUpID(spec.TxnRows), fmt.Sprintf("outboxd → Kafka catch-up, %d-row txns, idempotent: false", spec.TxnRows)
	relays := []relayRun{{run: func(ctx context.Context, rep int) Workload {
		return h.outboxdOver(ctx, noIdem, func() (benchSink, error) { return newNoIdemSink("bench.catchup") }, pos0, rep)
	}}}
	if err != nil {
		h.record(Workload{ID: eos.ID, Name: eos.Name, Kind: "catchup", Error: "the position after the rows: " + err.Error()})
		return relays
	}
	return append(relays, relayRun{run: func(ctx context.Context, rep int) Workload {
		return h.outboxdOver(ctx, eos, func() (benchSink, error) { return newEOSSink("bench.catchup", last) }, pos0, rep)
	}})
}

func eosCatchUpID(txnRows int) string    { return fmt.Sprintf("catchup-kafka-eos-txn%d", txnRows) }
func noIdemCatchUpID(txnRows int) string { return fmt.Sprintf("catchup-kafka-noidem-txn%d", txnRows) }

// The issue-24 ratios, each of two relays measured in the same run (the same rows, the same
// rotation for the catch-ups).
func eosEPSRatio(n int) string {
	return fmt.Sprintf("outboxd exactly-once / at-least-once, catch-up events/s, %d-row txns", n)
}
func idemEPSRatio(n int) string {
	return fmt.Sprintf("outboxd idempotent (default) / idempotent: false, catch-up events/s, %d-row txns", n)
}
func eosP99Ratio(rate int) string {
	return fmt.Sprintf("outboxd p99 at %d/s: exactly-once (read_committed) / at-least-once", rate)
}

// eosTargetRate is the steady rate of the issue's exactly-once latency target.
const eosTargetRate = 3000

type ratioAdder func(name string, a, b *Workload, f func(*Workload) *float64, unit string)

// issue24Ratios appends exactly-once against at-least-once and idempotent against not.
func (r *Results) issue24Ratios(add ratioAdder) {
	eps := func(w *Workload) *float64 { return w.EventsPerSec }
	cpu := func(w *Workload) *float64 { return w.CPUPer100k }
	for _, n := range r.Params.TxnSizes {
		alo := r.find(fmt.Sprintf("catchup-kafka-txn%d", n))
		eos, noIdem := r.find(eosCatchUpID(n)), r.find(noIdemCatchUpID(n))
		add(eosEPSRatio(n), eos, alo, eps, "events/s")
		add(fmt.Sprintf("outboxd exactly-once / at-least-once, CPU s per 100k events, %d-row txns", n), eos, alo, cpu, "CPU s/100k")
		add(idemEPSRatio(n), alo, noIdem, eps, "events/s")
		add(fmt.Sprintf("outboxd idempotent (default) / idempotent: false, CPU s per 100k events, %d-row txns", n), alo, noIdem, cpu, "CPU s/100k")
	}
	for _, rate := range r.Params.Rates {
		e, a := r.find(fmt.Sprintf("steady-kafka-eos-%d", rate)), r.find(fmt.Sprintf("steady-kafka-%d", rate))
		if e == nil || a == nil || e.Latency == nil || a.Latency == nil || a.Latency.P99MS <= 0 {
			continue
		}
		r.Ratios = append(r.Ratios, Ratio{Name: eosP99Ratio(rate), Value: fp(e.Latency.P99MS / a.Latency.P99MS),
			Detail: fmt.Sprintf("%.2f ms vs %.2f ms (p50 %.2f vs %.2f; achieved %.0f vs %.0f commits/s)", e.Latency.P99MS, a.Latency.P99MS,
				e.Latency.P50MS, a.Latency.P50MS, num0(e.EventsPerSec), num0(a.EventsPerSec))})
	}
}

type targetChecker func(target string, v *float64, ok func(float64) bool, format string)

// issue24Targets checks issue 24's measured-cost targets against the ratios of this run.
func (r *Results) issue24Targets(check targetChecker) {
	for _, n := range r.Params.TxnSizes {
		check(fmt.Sprintf("Exactly-once catch-up ≥ 0.7 × at-least-once events/s, %d-row txns", n),
			r.ratioValue(eosEPSRatio(n)), func(v float64) bool { return v >= 0.7 }, "%.2f")
	}
	check(fmt.Sprintf("Exactly-once p99 at %d/s ≤ 2 × at-least-once's", eosTargetRate),
		r.ratioValue(eosP99Ratio(eosTargetRate)), func(v float64) bool { return v <= 2 }, "%.2f×")
	for _, n := range r.Params.TxnSizes {
		check(fmt.Sprintf("Idempotent at-least-once catch-up ≥ 0.95 × idempotent: false events/s, %d-row txns", n),
			r.ratioValue(idemEPSRatio(n)), func(v float64) bool { return v >= 0.95 }, "%.2f")
	}
}
