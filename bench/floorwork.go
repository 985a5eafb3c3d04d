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
// -steady1-rate, once through outboxd and once through the franz-go floor relay, each to a fresh
// broker with the same generator and consumer; with -steady1-stamps each message's path is
// stamped (see stamps.go) and the workload carries the breakdown.
func (h *harness) steadyOne(ctx context.Context) {
	for _, sys := range []string{"outboxd-kafka", "floor-" + floorFranz} {
		if ctx.Err() != nil {
			return
		}
		h.record(h.steadyOneRun(ctx, sys))
	}
}

func (h *harness) steadyOneRun(ctx context.Context, sys string) Workload {
	rate := h.o.Steady1Rate
	w := Workload{ID: fmt.Sprintf("steady1-%s-%d", sys, rate), Kind: "steady", System: sys, TxnRows: 1, TargetRate: float64(rate)}
	if sys == "outboxd-kafka" {
		w.Name = fmt.Sprintf("outboxd → Kafka steady %d/s, ONE connection", rate)
	} else {
		w.Name = fmt.Sprintf("floor relay (franz-go) steady %d/s, ONE connection", rate)
	}
	fail := func(err error) Workload { w.Error = err.Error(); return w }
	dir := filepath.Join(h.tmp, w.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	stampsPath := ""
	if h.o.Steady1Stamps {
		stampsPath = filepath.Join(dir, "broker-stamps.txt")
	}
	kp, err := newKafkaStamped("bench.steady1", stampsPath)
	if err != nil {
		return fail(err)
	}
	ks := &kafkaSink{c: kp, t: "bench.steady1"}
	closed := false
	defer func() {
		if !closed {
			ks.close()
		}
	}()
	prefix := map[bool]string{true: "q1o-", false: "q1f-"}[sys == "outboxd-kafka"]
	cons, err := startConsumer(ks.c.addrs, ks.t, prefix, 2, h.epoch)
	if err != nil {
		return fail(err)
	}
	defer cons.close()
	pos, err := gtidPos(ctx, h.root)
	if err != nil {
		return fail(err)
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
		return fail(err)
	}
	defer p.stop(stopTimeout)
	rcv := kafkaReceiver{cons}
	if err := h.warmUp(ctx, outboxTable, prefix, 1, rcv, p.exited); err != nil {
		return fail(err)
	}
	tr := newTracker(int(float64(rate)*h.o.Steady.Seconds()) + 16)
	var tap *binlogTap
	if h.o.Steady1Stamps {
		if tap, err = startTap(h, pos, prefix, 0, len(tr.commit)); err != nil {
			return fail(err)
		}
	}
	w = h.steadyRun(ctx, steadyRunSpec{
		ID: w.ID, Name: w.Name, System: sys, Table: outboxTable, Rate: rate, Prefix: prefix, Run: 0,
		PID: p.pid(), Rcv: rcv, CollectTimeout: 20 * time.Second, Conns: 1, Tracker: tr,
	})
	if err := p.exited(); err != nil && w.Error == "" {
		w.Error = err.Error()
	}
	if tap != nil {
		tap.stop()
	}
	_ = p.stop(stopTimeout)
	if !h.o.Steady1Stamps || w.Error != "" {
		return w
	}
	ks.close() // the broker writes its stamps as it exits
	closed = true
	broker := make([]int64, len(tr.commit))
	if err := loadBrokerStamps(stampsPath, prefix, 0, h.epoch, broker); err != nil {
		w.Notes = append(w.Notes, err.Error())
		broker = nil
	}
	w.Segments = breakdown(tr, tap.stamps, broker, float64(rate))
	return w
}
