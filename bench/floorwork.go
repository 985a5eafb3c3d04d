package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// floorLabel is how results name a floor relay client.
var floorLabel = map[string]string{floorFranz: "franz-go", floorKafkaGo: "kafka-go Client.Produce", floorRocketMQ: "RocketMQ (plain client, SendSync)"}

// floorRun runs the floor relay with client over the binlog range from pos0 that a catch-up
// just wrote (txnRows-row transactions), to a fresh broker, measured as outboxd's catch-up is;
// rep numbers the repetition.
func (h *harness) floorRun(ctx context.Context, client string, txnRows int, pos0 string, rep int) Workload {
	rows := h.o.Rows
	if client == floorRocketMQ {
		rows = h.o.RMQRows
	}
	w := Workload{
		ID: fmt.Sprintf("floor-%s-txn%d", client, txnRows), Kind: "floor", System: "floor-" + client, Events: rows, TxnRows: txnRows,
		Name: fmt.Sprintf("floor relay: go-mysql → %s catch-up, %d-row txns", floorLabel[client], txnRows),
	}
	cfg := floorConfig{Client: client, Addr: h.srv.Addr, ServerID: uint32(h.serverID()), Start: pos0, Schema: benchSchema, Table: "outbox_event"}
	var sink benchSink
	if client == floorRocketMQ {
		rs, err := newRMQSink("BENCH_FLOOR")
		if err != nil {
			w.Error = err.Error()
			return w
		}
		cfg.NameServer, cfg.Topic, sink = rs.c.NameServer(), rs.t, rs
	} else {
		ks, err := newKafkaSink("bench.floor")
		if err != nil {
			w.Error = err.Error()
			return w
		}
		cfg.Brokers, cfg.Topic, sink = ks.c.addrs, ks.t, ks
	}
	logf("%s: run %d, reading the same range", w.Name, rep+1)
	h.measureCatchUp(ctx, &w, sink, func() (*outboxdProc, error) {
		return startFloor(filepath.Join(h.tmp, fmt.Sprintf("%s-%d", w.ID, rep)), cfg)
	})
	sink.close()
	return w
}

// steadyOne is the single-connection steady probe: ONE connection commits one row at a time at
// each -steady1-rates rate, once through outboxd and once through the franz-go floor relay, each
// to a fresh broker with the same generator and consumer; with -steady1-stamps each message's
// path is stamped (see stamps.go) and the workload carries the breakdown.
func (h *harness) steadyOne(ctx context.Context) {
	for _, sys := range []string{"outboxd-kafka", "floor-" + floorFranz} {
		if ctx.Err() != nil {
			return
		}
		for _, w := range h.steadyOneRelay(ctx, sys) {
			h.record(w)
		}
	}
	if h.o.Steady1Paired {
		for _, rate := range h.o.Steady1Rates {
			if ctx.Err() == nil {
				h.steadyOnePaired(ctx, rate)
			}
		}
	}
}

func steadyOneIDs(sys string, rate int) (string, string) {
	id := fmt.Sprintf("steady1-%s-%d", sys, rate)
	if sys == "outboxd-kafka" {
		return id, fmt.Sprintf("outboxd → Kafka steady %d/s, ONE connection", rate)
	}
	return id, fmt.Sprintf("floor relay (franz-go) steady %d/s, ONE connection", rate)
}

// steadyOneRelay starts one relay (sys) and measures every probe rate through it.
func (h *harness) steadyOneRelay(ctx context.Context, sys string) []Workload {
	rates := h.o.Steady1Rates
	out := make([]Workload, len(rates))
	for k, rate := range rates {
		id, name := steadyOneIDs(sys, rate)
		out[k] = Workload{ID: id, Name: name, Kind: "steady", System: sys, TxnRows: 1, TargetRate: float64(rate)}
	}
	failAll := func(err error) []Workload {
		for k := range out {
			if out[k].Error == "" && out[k].Latency == nil {
				out[k].Error = err.Error()
			}
		}
		return out
	}
	dir := filepath.Join(h.tmp, "steady1-"+sys)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return failAll(err)
	}
	stampsPath := ""
	if h.o.Steady1Stamps {
		stampsPath = filepath.Join(dir, "broker-stamps.txt")
	}
	kp, err := newKafkaStamped("bench.steady1", stampsPath)
	if err != nil {
		return failAll(err)
	}
	ks := &kafkaSink{c: kp, t: "bench.steady1"}
	closed := false
	defer func() {
		if !closed {
			ks.close()
		}
	}()
	prefix := map[bool]string{true: "q1o-", false: "q1f-"}[sys == "outboxd-kafka"]
	cons, err := startConsumer(ks.c.addrs, ks.t, prefix, len(rates)+1, h.epoch)
	if err != nil {
		return failAll(err)
	}
	defer cons.close()
	pos, err := gtidPos(ctx, h.root)
	if err != nil {
		return failAll(err)
	}
	var p *outboxdProc
	if sys == "outboxd-kafka" {
		p, err = startOutboxd(h.bin, relayConfig{
			Addr: h.srv.Addr, ServerID: h.serverID(), Start: pos, Table: outboxTable.String(),
			Sink: ks.sinkYAML(), Topic: ks.topic(), Dir: dir, Extra: h.o.OutboxdExtra,
		})
	} else {
		p, err = startFloor(dir, floorConfig{Client: floorFranz, Addr: h.srv.Addr, ServerID: uint32(h.serverID()), Start: pos,
			Schema: benchSchema, Table: "outbox_event", Brokers: ks.c.addrs, Topic: ks.t})
	}
	if err != nil {
		return failAll(err)
	}
	defer p.stop(stopTimeout)
	rcv := kafkaReceiver{cons}
	if err := h.warmUp(ctx, outboxTable, prefix, len(rates), rcv, p.exited); err != nil {
		return failAll(err)
	}
	trs := make([]*tracker, len(rates))
	taps := make([]*binlogTap, len(rates))
	for k, rate := range rates {
		if ctx.Err() != nil {
			return failAll(ctx.Err())
		}
		trs[k] = newTracker(int(float64(rate)*h.o.Steady.Seconds()) + 16)
		if h.o.Steady1Stamps {
			at, err := gtidPos(ctx, h.root)
			if err == nil {
				taps[k], err = startTap(h, at, prefix, k, len(trs[k].commit))
			}
			if err != nil {
				out[k].Error = err.Error()
				continue
			}
		}
		out[k] = h.steadyRun(ctx, steadyRunSpec{
			ID: out[k].ID, Name: out[k].Name, System: sys, Table: outboxTable, Rate: rate, Prefix: prefix, Run: k,
			PID: p.pid(), Rcv: rcv, CollectTimeout: 20 * time.Second, Conns: 1, Tracker: trs[k],
		})
		if taps[k] != nil {
			taps[k].stop()
		}
		if err := p.exited(); err != nil && out[k].Error == "" {
			out[k].Error = err.Error()
		}
	}
	_ = p.stop(stopTimeout)
	if !h.o.Steady1Stamps {
		return out
	}
	ks.close() // the broker writes its stamps as it exits
	closed = true
	for k, rate := range rates {
		if out[k].Error != "" || taps[k] == nil {
			continue
		}
		broker := make([]int64, len(trs[k].commit))
		if err := loadBrokerStamps(stampsPath, prefix, k, h.epoch, broker); err != nil {
			out[k].Notes = append(out[k].Notes, err.Error())
			broker = nil
		}
		out[k].Segments = breakdown(trs[k], taps[k].stamps, broker, float64(rate))
		if err := writeStampsTSV(filepath.Join(dir, fmt.Sprintf("stamps-%d.tsv", rate)), h.epoch, trs[k], taps[k].stamps, broker, float64(rate)); err != nil {
			logf("%s: %v", out[k].Name, err)
		}
	}
	return out
}

// groupReceiver is one consumer per relay (and broker) of the same commits: tr goes to the
// first, and shadow trackers sharing tr's commit stamps go to the others.
type groupReceiver struct {
	rs      []kafkaReceiver
	shadows map[*atomic.Int64][]*tracker // by &tr.commit[0]
}

// all is tr followed by its shadows, one per receiver.
func (g groupReceiver) all(tr *tracker) []*tracker {
	k := &tr.commit[0]
	if g.shadows[k] == nil {
		ts := []*tracker{tr}
		for range g.rs[1:] {
			ts = append(ts, &tracker{commit: tr.commit, sent: tr.sent, recv: make([]atomic.Int64, len(tr.commit))})
		}
		g.shadows[k] = ts
	}
	return g.shadows[k]
}

func (g groupReceiver) attach(run int, tr *tracker) {
	for i, t := range g.all(tr) {
		g.rs[i].attach(run, t)
	}
}
func (g groupReceiver) ready(tr *tracker) bool {
	for i, t := range g.all(tr) {
		if !g.rs[i].ready(t) {
			return false
		}
	}
	return true
}
func (g groupReceiver) collect(ctx context.Context, run int, tr *tracker, timeout time.Duration) {
	for i, t := range g.all(tr) {
		g.rs[i].collect(ctx, run, t, timeout)
	}
}

func connsLabel(n int) string {
	if n == 1 {
		return "ONE connection"
	}
	return fmt.Sprintf("%d connections", n)
}

// steadyOnePaired runs outboxd and the floor relays (-steady1-floors) AT ONCE, each to its own
// broker and consumer, on the same single-connection commits: every message has a latency
// through each, under exactly the same database and machine load (which a shared machine does not
// hold still from one run to the next). The relays compete for the same cores, which costs each.
// CPU % is outboxd's.
func (h *harness) steadyOnePaired(ctx context.Context, rate int) {
	systems := []string{"outboxd-kafka"}
	for _, f := range h.o.Steady1Floors {
		systems = append(systems, "floor-"+f)
	}
	ws := make([]Workload, len(systems))
	for k, sys := range systems {
		ws[k] = Workload{ID: fmt.Sprintf("steady1-paired-%s-%d", sys, rate), Kind: "steady", System: sys, TxnRows: 1, TargetRate: float64(rate),
			Name: fmt.Sprintf("paired: %s steady %d/s, %s, same commits", sys, rate, connsLabel(h.o.PairedConns))}
	}
	fail := func(err error) {
		for k := range ws {
			ws[k].Error = err.Error()
			h.record(ws[k])
		}
	}
	dir := filepath.Join(h.tmp, "steady1-paired")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
		return
	}
	const prefix, topic = "q1p-", "bench.steady1p"
	ks := make([]*kafkaSink, len(systems))
	stamps := make([]string, len(systems))
	rcv := groupReceiver{shadows: map[*atomic.Int64][]*tracker{}}
	for k, sys := range systems {
		stamps[k] = filepath.Join(dir, "broker-stamps-"+sys+".txt")
		kp, err := newKafkaStamped(topic, stamps[k])
		if err != nil {
			fail(err)
			return
		}
		ks[k] = &kafkaSink{c: kp, t: topic}
		defer ks[k].close()
		c, err := startConsumer(kp.addrs, topic, prefix, 2, h.epoch)
		if err != nil {
			fail(err)
			return
		}
		defer c.close()
		rcv.rs = append(rcv.rs, kafkaReceiver{c})
	}
	pos, err := gtidPos(ctx, h.root)
	if err != nil {
		fail(err)
		return
	}
	procs := make([]*outboxdProc, len(systems))
	for k, sys := range systems {
		if k == 0 {
			procs[k], err = startOutboxd(h.bin, relayConfig{
				Addr: h.srv.Addr, ServerID: h.serverID(), Start: pos, Table: outboxTable.String(),
				Sink: ks[k].sinkYAML(), Topic: topic, Dir: dir, Extra: h.o.OutboxdExtra,
			})
		} else {
			procs[k], err = startFloor(filepath.Join(dir, sys), floorConfig{Client: sys[len("floor-"):], Addr: h.srv.Addr, ServerID: uint32(h.serverID()),
				Start: pos, Schema: benchSchema, Table: "outbox_event", Brokers: ks[k].c.addrs, Topic: topic})
		}
		if err != nil {
			fail(err)
			return
		}
		defer procs[k].stop(stopTimeout)
	}
	check := func() error {
		var errs []error
		for _, p := range procs {
			errs = append(errs, p.exited())
		}
		return errors.Join(errs...)
	}
	if err := h.warmUp(ctx, outboxTable, prefix, 1, rcv, check); err != nil {
		fail(err)
		return
	}
	tr := newTracker(int(float64(rate)*h.o.Steady.Seconds()) + 16)
	at, err := gtidPos(ctx, h.root)
	if err != nil {
		fail(err)
		return
	}
	tap, err := startTap(h, at, prefix, 0, len(tr.commit))
	if err != nil {
		fail(err)
		return
	}
	w := h.steadyRun(ctx, steadyRunSpec{
		ID: ws[0].ID, Name: ws[0].Name, System: ws[0].System, Table: outboxTable, Rate: rate, Prefix: prefix, Run: 0,
		PID: procs[0].pid(), Rcv: rcv, CollectTimeout: 20 * time.Second, Conns: h.o.PairedConns, Tracker: tr,
	})
	tap.stop()
	if err := check(); err != nil && w.Error == "" {
		w.Error = err.Error()
	}
	for _, p := range procs {
		_ = p.stop(stopTimeout)
	}
	ws[0] = w
	trs := rcv.all(tr)
	for k := range systems {
		if k > 0 {
			trs[k].start.Store(tr.start.Load())
			ws[k].Events, ws[k].Seconds, ws[k].EventsPerSec, ws[k].Error = w.Events, w.Seconds, w.EventsPerSec, w.Error
			ws[k].Latency = latencies(trs[k])
			ws[k].Notes = append(ws[k].Notes, "the same commits as the paired outboxd row; CPU not measured")
		}
		if w.Error == "" {
			ks[k].close() // the broker writes its stamps as it exits (the deferred close then returns at once)
			broker := make([]int64, len(tr.commit))
			if err := loadBrokerStamps(stamps[k], prefix, 0, h.epoch, broker); err != nil {
				broker = nil
			}
			ws[k].Segments = breakdown(trs[k], tap.stamps, broker, float64(rate))
			if err := writeStampsTSV(filepath.Join(dir, "stamps-"+systems[k]+".tsv"), h.epoch, trs[k], tap.stamps, broker, float64(rate)); err != nil {
				logf("%s: %v", ws[k].Name, err)
			}
		}
		h.record(ws[k])
	}
}
