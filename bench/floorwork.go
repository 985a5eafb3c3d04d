package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// floorLabel is how results name a floor relay client.
var floorLabel = map[string]string{floorFranz: "franz-go", floorKafkaGo: "kafka-go Client.Produce", floorRocketMQ: "RocketMQ (plain client, SendSync)"}

// floorCatchUp runs the floor relay with client over the binlog range from pos0 that a catch-up
// just wrote (txnRows-row transactions), to a fresh broker, measured as outboxd's catch-up is.
func (h *harness) floorCatchUp(ctx context.Context, client string, txnRows int, pos0 string) {
	if ctx.Err() != nil {
		return
	}
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
			h.record(w)
			return
		}
		cfg.NameServer, cfg.Topic, sink = rs.c.NameServer(), rs.t, rs
	} else {
		ks, err := newKafkaSink("bench.floor")
		if err != nil {
			w.Error = err.Error()
			h.record(w)
			return
		}
		cfg.Brokers, cfg.Topic, sink = ks.c.addrs, ks.t, ks
	}
	logf("%s: reading the same range", w.Name)
	h.measureCatchUp(ctx, &w, sink, func() (*outboxdProc, error) { return startFloor(filepath.Join(h.tmp, w.ID), cfg) })
	sink.close()
	h.record(w)
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
	}
	return out
}
