package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// stopTimeout bounds outboxd's graceful stop (its own drain limit is 30 s).
const stopTimeout = 40 * time.Second

// catchUpTimeout bounds one relay's catch-up, so a stalled relay fails its workload instead of
// using up the whole run.
const catchUpTimeout = 10 * time.Minute

// catchSpec is one catch-up run of outboxd: rows written first, then outboxd started at the
// position before them.
type catchSpec struct {
	ID, Name, Kind string
	Rows, TxnRows  int
	Conns          int
	Prefix         string
	Sink           benchSink
	// CheckpointInterval is outboxd's checkpoint.interval ("" is the bench's 1s).
	CheckpointInterval string
}

// catchUp generates the rows, runs outboxd over them and measures it. It returns the workload
// (with Error set on failure) and the GTID position before the rows.
func (h *harness) catchUp(ctx context.Context, s catchSpec) (Workload, string) {
	w := Workload{ID: s.ID, Name: s.Name, Kind: s.Kind, System: "outboxd-" + s.Sink.kind(), Events: s.Rows, TxnRows: s.TxnRows}
	fail := func(err error) (Workload, string) { w.Error = err.Error(); return w, "" }
	// Each run's rows start a fresh binlog file. Without it, MariaDB 10.11 (which has no GTID
	// index) reads and skips the earlier workloads' part of the file before it sends the
	// first row, and that scan lands in the catch-up time.
	if _, err := h.root.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		return fail(err)
	}
	pos0, err := gtidPos(ctx, h.root)
	if err != nil {
		return fail(err)
	}
	logf("%s: writing %d rows in %d-row transactions over %d connections", s.Name, s.Rows, s.TxnRows, s.Conns)
	gen, err := bulkGenerate(ctx, h.gen, bulkSpec{Table: outboxTable, Rows: s.Rows, TxnRows: s.TxnRows, Conns: s.Conns, Prefix: s.Prefix})
	if err != nil {
		return fail(fmt.Errorf("generate: %w", err))
	}
	w.GenSeconds = gen.Seconds()
	logf("%s: wrote them in %s (%.0f rows/s); starting outboxd at %s", s.Name, gen.Round(time.Millisecond), float64(s.Rows)/gen.Seconds(), pos0)

	h.measureCatchUp(ctx, &w, s.Sink, func() (*outboxdProc, error) {
		return startOutboxd(h.bin, relayConfig{
			Addr: h.srv.Addr, ServerID: h.serverID(), Start: pos0, Table: outboxTable.String(),
			Sink: s.Sink.sinkYAML(), Topic: s.Sink.topic(), Dir: filepath.Join(h.tmp, s.ID), Extra: h.o.OutboxdExtra,
			CheckpointInterval: s.CheckpointInterval, Delivery: deliveryOf(s.Sink, s.CheckpointInterval),
		})
	})
	return w, pos0 // the rows are written even when outboxd failed: the ceiling and floors can read them
}

// measureCatchUp runs one relay process (start) over rows already in the binlog and fills w with
// its throughput, CPU and memory, and MariaDB's and the broker+harness CPU meanwhile. The clock
// runs from the process start to the broker holding rows messages. It blocks; failures go into
// w.Error.
func (h *harness) measureCatchUp(ctx context.Context, w *Workload, sink benchSink, start func() (*outboxdProc, error)) {
	rows := w.Events
	fail := func(err error) { w.Error = err.Error() }
	h.waitDBIdle(ctx)
	// Earlier workloads (a closed kfake holding a million records, the generator) leave
	// garbage in this process, which also hosts the broker: collect it now, not during the run.
	runtime.GC()
	debug.FreeOSMemory()
	dbCPU0, _ := procCPU(h.dbPID)
	self0, _ := procCPU(os.Getpid())
	var broker0 time.Duration
	if bp, ok := sink.(interface{ brokerPID() int }); ok {
		broker0, _ = procCPU(bp.brokerPID())
	}
	p, err := start()
	if err != nil {
		fail(err)
		return
	}
	defer p.stop(stopTimeout)
	sampler := sampleRSS(p.pid(), 100*time.Millisecond)
	wctx, wcancel := context.WithTimeout(ctx, catchUpTimeout)
	doneAt, err := sink.waitCount(wctx, int64(rows), p.exited)
	wcancel()
	samples := sampler.Stop()
	if err != nil {
		fail(err)
		return
	}
	cpu, err := procCPU(p.pid())
	if err != nil {
		fail(err)
		return
	}
	mem, _ := procMem(p.pid())
	dbCPU1, _ := procCPU(h.dbPID)
	self1, _ := procCPU(os.Getpid())
	if bp, ok := sink.(interface{ brokerPID() int }); ok {
		b1, _ := procCPU(bp.brokerPID())
		self1 += b1 - broker0
	}
	if err := p.stop(stopTimeout); err != nil {
		w.Notes = append(w.Notes, "stop: "+oneLine(err.Error(), 200))
	}
	peak := mem.HWM
	for _, v := range samples {
		peak = max(peak, v)
	}
	elapsed := doneAt.Sub(p.started)
	w.Seconds = elapsed.Seconds()
	w.EventsPerSec = fp(float64(rows) / elapsed.Seconds())
	w.CPUSeconds = fp(cpu.Seconds())
	w.CPUPer100k = fp(cpu.Seconds() / float64(rows) * 1e5)
	w.RSSPeakMiB = fp(mib(peak))
	if h.dbPID != 0 {
		w.DBCPUSeconds = fp((dbCPU1 - dbCPU0).Seconds())
		w.DBCPUPercent = fp(100 * (dbCPU1 - dbCPU0).Seconds() / elapsed.Seconds())
	}
	w.HarnessCPUPercent = fp(100 * (self1 - self0).Seconds() / elapsed.Seconds())
}

// The catch-up that also runs outboxd with checkpoint.interval 100ms (the 1 s run is the usual one).
const (
	fastCkptTxnRows = 100
	fastCkptID      = "catchup-kafka-txn100-ckpt100ms"
)

func (h *harness) catchUpWithCeiling(ctx context.Context, txnRows int) {
	sink, err := newKafkaSink("bench.catchup")
	if err != nil {
		h.record(Workload{ID: fmt.Sprintf("catchup-kafka-txn%d", txnRows), Name: "catch-up", Error: err.Error()})
		return
	}
	spec := catchSpec{
		ID: fmt.Sprintf("catchup-kafka-txn%d", txnRows), Kind: "catchup",
		Name: fmt.Sprintf("outboxd → Kafka catch-up, %d-row txns", txnRows),
		Rows: h.o.Rows, TxnRows: txnRows, Conns: h.o.GenConns, Prefix: fmt.Sprintf("c%d-", txnRows), Sink: sink,
	}
	w, pos0 := h.catchUp(ctx, spec)
	sink.close() // frees kfake's copy of the messages before the ceiling runs
	if !h.o.want("catchup") && w.Error == "" {
		// Only the ceiling or the floor was asked for; the catch-up still had to write the rows.
		w.Notes = append(w.Notes, "run to write the rows for the ceiling and floor")
	}
	if pos0 == "" || w.Error != "" {
		h.record(w)
		return
	}
	h.ceiling(ctx, txnRows, pos0)
	newSink := func() (benchSink, error) { return newKafkaSink("bench.catchup") }
	relays := []relayRun{{run: func(ctx context.Context, rep int) Workload { return h.outboxdOver(ctx, spec, newSink, pos0, rep) }}}
	if txnRows == fastCkptTxnRows && h.o.want("catchup") {
		// The same rows with checkpoint.interval 100ms, in the same rotation: a save must not
		// slow the stream (issue 24).
		fast := spec
		fast.ID, fast.Name, fast.CheckpointInterval = fastCkptID, spec.Name+", checkpoint.interval 100ms", "100ms"
		relays = append(relays, relayRun{run: func(ctx context.Context, rep int) Workload { return h.outboxdOver(ctx, fast, newSink, pos0, rep) }})
	}
	if h.o.want("catchup") {
		relays = append(relays, h.issue24Relays(ctx, spec, pos0)...)
	}
	if h.o.want("floor") {
		for _, client := range []string{floorFranz, floorKafkaGo} {
			relays = append(relays, relayRun{run: func(ctx context.Context, rep int) Workload {
				return h.floorRun(ctx, client, txnRows, pos0, rep)
			}})
		}
	}
	if len(relays) == 1 {
		h.record(w)
		return
	}
	for _, runs := range rotated(ctx, h.o.Reps, &w, relays) {
		if len(runs) > 0 {
			h.record(median(runs))
		}
	}
}

// ceiling reads the binlog range from pos0 with go-mysql alone and records it.
func (h *harness) ceiling(ctx context.Context, txnRows int, pos0 string) {
	if !h.o.want("ceiling") || ctx.Err() != nil {
		return
	}
	c := Workload{ID: fmt.Sprintf("ceiling-txn%d", txnRows), Kind: "ceiling", System: "go-mysql", Events: h.o.Rows, TxnRows: txnRows,
		Name: fmt.Sprintf("ceiling: go-mysql decode only, %d-row txns", txnRows)}
	logf("%s: reading the same range", c.Name)
	r, err := readCeiling(ctx, h.srv.Addr, uint32(h.serverID()), pos0, benchSchema, "outbox_event", h.o.Rows)
	if err != nil {
		c.Error = err.Error()
	} else {
		c.Seconds = r.Elapsed.Seconds()
		c.EventsPerSec = fp(float64(r.Rows) / r.Elapsed.Seconds())
		c.CPUSeconds = fp(r.CPU.Seconds())
		c.CPUPer100k = fp(r.CPU.Seconds() / float64(r.Rows) * 1e5)
		c.Notes = append(c.Notes, "CPU is the harness process's, which runs only the go-mysql reader then")
	}
	h.record(c)
}

func (h *harness) memory(ctx context.Context) {
	sink, err := newKafkaSink("bench.big")
	if err != nil {
		h.record(Workload{ID: "memory-kafka-big", Name: "memory", Error: err.Error()})
		return
	}
	defer sink.close()
	w, _ := h.catchUp(ctx, catchSpec{
		ID: "memory-kafka-big", Kind: "memory", Name: fmt.Sprintf("outboxd → Kafka, ONE transaction of %d rows", h.o.BigRows),
		Rows: h.o.BigRows, TxnRows: h.o.BigRows, Conns: 1, Prefix: "big-", Sink: sink,
	})
	h.record(w)
}

// receiver learns when steady-run messages arrived.
type receiver interface {
	attach(run int, tr *tracker)
	// ready reports whether any message of tr arrived (warm-up).
	ready(tr *tracker) bool
	// collect waits until every committed row of tr arrived or timeout passes, filling tr.recv.
	collect(ctx context.Context, run int, tr *tracker, timeout time.Duration)
}

type kafkaReceiver struct{ c *consumer }

func (k kafkaReceiver) attach(run int, tr *tracker) { k.c.trackers[run].Store(tr) }
func (k kafkaReceiver) ready(tr *tracker) bool {
	for i := range tr.recv {
		if tr.recv[i].Load() != 0 {
			return true
		}
	}
	return false
}
func (k kafkaReceiver) collect(ctx context.Context, _ int, tr *tracker, timeout time.Duration) {
	waitReceived(ctx, tr, timeout)
}

// rmqReceiver reads the test broker's stored messages; their StoredAt is the receive time.
type rmqReceiver struct {
	s      *rmqSink
	prefix string
	epoch  time.Time
}

func (r rmqReceiver) attach(int, *tracker) {}
func (r rmqReceiver) ready(*tracker) bool  { return r.s.sends() > 0 }
func (r rmqReceiver) collect(ctx context.Context, run int, tr *tracker, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range r.s.c.Messages(r.s.t) {
			w, i, ok := parseEventID(r.prefix, m.Keys)
			if ok && w == run && i < len(tr.recv) {
				tr.recv[i].CompareAndSwap(0, int64(m.StoredAt.Sub(r.epoch))+1)
			}
		}
		all := true
		for i := range tr.commit {
			if tr.commit[i].Load() != 0 && tr.recv[i].Load() == 0 {
				all = false
				break
			}
		}
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// warmUp commits a probe row every 100 ms until one arrives, so the measured runs start with a
// connected relay.
func (h *harness) warmUp(ctx context.Context, t table, prefix string, run int, rcv receiver, check func() error) error {
	tr := newTracker(600)
	rcv.attach(run, tr)
	q := insertSQL(t, 1)
	for i := 0; i < len(tr.commit); i++ {
		if _, err := h.gen.ExecContext(ctx, q, rowArgs(t, nil, eventID(prefix, run, i), i)...); err != nil {
			return fmt.Errorf("warm-up insert: %w", err)
		}
		tr.commit[i].Store(int64(time.Since(h.epoch)) + 1)
		if rcv.ready(tr) {
			return nil
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("warm-up: no probe row arrived within 60 s")
}

// prewarmConns opens n pool connections at once and returns them to the pool, so the measured
// window does not count their session setup (SET NAMES) as statements.
func (h *harness) prewarmConns(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.gen.Conn(ctx)
			if err != nil {
				return
			}
			_ = c.PingContext(ctx)
			time.Sleep(50 * time.Millisecond) // hold it so the others need their own
			c.Close()
		}()
	}
	wg.Wait()
}

func genConns(rate int) int { return max(4, min(24, rate/500)) }

// steadyRunSpec is one paced rate against a running relay.
type steadyRunSpec struct {
	ID, Name, System string
	Table            table
	Rate             int
	Prefix           string
	Run              int
	PID              int // the relay's process, 0 when it runs in the harness
	Rcv              receiver
	CollectTimeout   time.Duration
	OwnStmts         func() int64 // nil unless the relay counts its statements
	Conns            int          // generator connections; 0: genConns(Rate)
	// Tracker, when set, is the run's tracker (the caller reads its stamps afterwards).
	Tracker *tracker
}

func (h *harness) steadyRun(ctx context.Context, s steadyRunSpec) Workload {
	w := Workload{ID: s.ID, Name: s.Name, Kind: "steady", System: s.System, TxnRows: 1, TargetRate: float64(s.Rate)}
	tr := s.Tracker
	if tr == nil {
		tr = newTracker(int(float64(s.Rate)*h.o.Steady.Seconds()) + 16)
	}
	s.Rcv.attach(s.Run, tr)
	conns := s.Conns
	if conns == 0 {
		conns = genConns(s.Rate)
	}
	h.prewarmConns(ctx, conns)
	var own0 int64
	if s.OwnStmts != nil {
		own0 = s.OwnStmts()
	}
	logf("%s: %d commits/s for %s over %d connections", s.Name, s.Rate, h.o.Steady, conns)
	win, err := openWindow(ctx, h.root, s.PID, h.dbPID)
	if err != nil {
		w.Error = err.Error()
		return w
	}
	res, genErr := steadyGenerate(ctx, h.gen, steadySpec{Table: s.Table, Rate: float64(s.Rate), Duration: h.o.Steady, Conns: conns, Prefix: s.Prefix, Run: s.Run}, tr, h.epoch)
	wr, err := win.close(ctx, h.root)
	if err != nil {
		w.Error = err.Error()
		return w
	}
	var own int64
	if s.OwnStmts != nil {
		own = s.OwnStmts() - own0
	}
	s.Rcv.collect(ctx, s.Run, tr, s.CollectTimeout)
	if genErr != nil {
		w.Error = genErr.Error()
		return w
	}
	secs := wr.Wall.Seconds()
	w.Events = res.Committed
	w.Seconds = secs
	if res.Elapsed > 0 {
		w.EventsPerSec = fp(float64(res.Committed) / res.Elapsed.Seconds())
	}
	w.Latency = latencies(tr)
	w.DBQueriesPerSec = fp(float64(wr.Questions-res.Stmts) / secs)
	if s.OwnStmts != nil {
		w.OwnQueriesPerSec = fp(float64(own) / secs)
	}
	if h.dbPID != 0 {
		w.DBCPUPercent = fp(wr.DBCPUPercent)
	}
	if s.PID != 0 {
		w.CPUPercent = fp(wr.CPUPercent)
		if res.Committed > 0 {
			w.CPUPer100k = fp(wr.CPUPercent / 100 * secs / float64(res.Committed) * 1e5)
		}
		w.RSSSteadyMiB = fp(mib(wr.RSSMedian))
		w.RSSPeakMiB = fp(mib(wr.HWM))
	}
	if res.Behind > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("the generator fell behind: %d due rows not committed (achieved %.0f/s)", res.Behind, num0(w.EventsPerSec)))
	}
	if l := w.Latency; l.Early > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d of %d messages (%.1f%%) reached the consumer before COMMIT returned to the generator (up to %.2f ms before), counted as 0 ms",
			l.Early, l.Count, 100*float64(l.Early)/float64(l.Count), -l.EarliestMS))
	}
	if w.Latency.Missing > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d committed rows not received within %s", w.Latency.Missing, s.CollectTimeout))
	}
	return w
}

func num0(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

// steadyOutboxd runs outboxd once and measures each rate in turn.
func (h *harness) steadyOutboxd(ctx context.Context, kind string, rates []int) {
	ids := func(rate int) (string, string) {
		return fmt.Sprintf("steady-%s-%d", kind, rate), fmt.Sprintf("outboxd → %s steady %d/s", map[string]string{"kafka": "Kafka", "kafka-eos": "Kafka exactly-once", "rocketmq": "RocketMQ"}[kind], rate)
	}
	failAll := func(err error) {
		for _, r := range rates {
			id, name := ids(r)
			h.record(Workload{ID: id, Name: name, Kind: "steady", System: "outboxd-" + kind, Error: err.Error()})
		}
	}
	prefix := map[string]string{"kafka": "sk-", "kafka-eos": "se-", "rocketmq": "sr-"}[kind]
	var sink benchSink
	var rcv receiver
	switch kind {
	case "kafka":
		ks, err := newKafkaSink("bench.steady")
		if err != nil {
			failAll(err)
			return
		}
		defer ks.close()
		cons, err := startConsumer(ks.c.addrs, ks.t, prefix, len(rates)+1, h.epoch)
		if err != nil {
			failAll(err)
			return
		}
		defer cons.close()
		sink, rcv = ks, kafkaReceiver{cons}
	case "kafka-eos":
		// Latency runs to the moment a read_committed consumer receives the event: a record of
		// an open Kafka transaction is not visible before its commit.
		es, err := newEOSSink("bench.steady", "")
		if err != nil {
			failAll(err)
			return
		}
		defer es.close()
		cons, err := startConsumer(es.c.addrs, es.t, prefix, len(rates)+1, h.epoch, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			failAll(err)
			return
		}
		defer cons.close()
		sink, rcv = es, kafkaReceiver{cons}
	default:
		rs, err := newRMQSink("BENCH_STEADY")
		if err != nil {
			failAll(err)
			return
		}
		defer rs.close()
		sink, rcv = rs, rmqReceiver{s: rs, prefix: prefix, epoch: h.epoch}
	}
	pos, err := gtidPos(ctx, h.root)
	if err != nil {
		failAll(err)
		return
	}
	p, err := startOutboxd(h.bin, relayConfig{
		Addr: h.srv.Addr, ServerID: h.serverID(), Start: pos, Table: outboxTable.String(),
		Sink: sink.sinkYAML(), Topic: sink.topic(), Dir: filepath.Join(h.tmp, "steady-"+kind), Extra: h.o.OutboxdExtra,
		Delivery: deliveryOf(sink, ""),
	})
	if err != nil {
		failAll(err)
		return
	}
	defer p.stop(stopTimeout)
	if err := h.warmUp(ctx, outboxTable, prefix, len(rates), rcv, p.exited); err != nil {
		failAll(err)
		return
	}
	for k, rate := range rates {
		if ctx.Err() != nil {
			return
		}
		id, name := ids(rate)
		w := h.steadyRun(ctx, steadyRunSpec{
			ID: id, Name: name, System: "outboxd-" + kind, Table: outboxTable, Rate: rate, Prefix: prefix, Run: k,
			PID: p.pid(), Rcv: rcv, CollectTimeout: 20 * time.Second,
		})
		if err := p.exited(); err != nil && w.Error == "" {
			w.Error = err.Error()
		}
		h.record(w)
	}
}

// steadyPoller runs the polling relay at interval iv and measures each baseline rate.
func (h *harness) steadyPoller(ctx context.Context, iv time.Duration) {
	sys := "poll-" + iv.String()
	rates := h.o.BaselineRates
	ids := func(rate int) (string, string) {
		return fmt.Sprintf("steady-%s-%d", sys, rate), fmt.Sprintf("polling relay (%s interval) steady %d/s", iv, rate)
	}
	failAll := func(err error) {
		for _, r := range rates {
			id, name := ids(r)
			h.record(Workload{ID: id, Name: name, Kind: "steady", System: sys, Error: err.Error()})
		}
	}
	prefix := "p" + strconv.FormatInt(iv.Milliseconds(), 10) + "-"
	ks, err := newKafkaSink("bench.poll")
	if err != nil {
		failAll(err)
		return
	}
	defer ks.close()
	cons, err := startConsumer(ks.c.addrs, ks.t, prefix, len(rates)+1, h.epoch)
	if err != nil {
		failAll(err)
		return
	}
	defer cons.close()
	pl, stop, check, err := h.startPoller(ctx, ks, iv)
	if err != nil {
		failAll(err)
		return
	}
	defer stop()
	rcv := kafkaReceiver{cons}
	if err := h.warmUp(ctx, pollTable, prefix, len(rates), rcv, check); err != nil {
		failAll(err)
		return
	}
	for k, rate := range rates {
		if ctx.Err() != nil {
			return
		}
		id, name := ids(rate)
		w := h.steadyRun(ctx, steadyRunSpec{
			ID: id, Name: name, System: sys, Table: pollTable, Rate: rate, Prefix: prefix, Run: k,
			Rcv: rcv, CollectTimeout: 20*time.Second + 3*iv, OwnStmts: pl.stmts.Load,
		})
		if err := check(); err != nil && w.Error == "" {
			w.Error = err.Error()
		}
		h.record(w)
	}
}

// startPoller runs a polling relay on its own pool until stop; check reports its failure.
func (h *harness) startPoller(ctx context.Context, ks *kafkaSink, iv time.Duration) (*poller, func(), func() error, error) {
	pdb, err := openGenDB(h.srv.RootDSN(benchSchema), 2)
	if err != nil {
		return nil, nil, nil, err
	}
	pl, err := newPoller(pdb, ks.c.addrs, ks.t, iv)
	if err != nil {
		pdb.Close()
		return nil, nil, nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		runErr = pl.run(pctx)
		close(done)
	}()
	stop := func() {
		cancel()
		<-done
		pdb.Close()
	}
	check := func() error {
		select {
		case <-done:
			if runErr != nil && !errors.Is(runErr, context.Canceled) {
				return fmt.Errorf("polling relay stopped: %w", runErr)
			}
			return errors.New("polling relay stopped")
		default:
			return nil
		}
	}
	return pl, stop, check, nil
}

// baselineCatchUp writes BaselineRows rows into mq_outbox, then lets the polling relay (10 ms
// interval; a full batch polls again at once, so the interval barely matters) drain them.
func (h *harness) baselineCatchUp(ctx context.Context) {
	n := h.o.BaselineRows
	w := Workload{ID: "catchup-poll-10ms", Name: "polling relay → Kafka catch-up, 1-row txns", Kind: "catchup", System: "poll-10ms", Events: n, TxnRows: 1}
	defer func() { h.record(w) }()
	logf("%s: writing %d rows", w.Name, n)
	gen, err := bulkGenerate(ctx, h.gen, bulkSpec{Table: pollTable, Rows: n, TxnRows: 1, Conns: h.o.GenConns, Prefix: "bc-"})
	if err != nil {
		w.Error = err.Error()
		return
	}
	w.GenSeconds = gen.Seconds()
	ks, err := newKafkaSink("bench.pollcatchup")
	if err != nil {
		w.Error = err.Error()
		return
	}
	defer ks.close()
	q0, err := questions(ctx, h.root)
	if err != nil {
		w.Error = err.Error()
		return
	}
	dbCPU0, _ := procCPU(h.dbPID)
	self0 := selfCPU()
	t0 := time.Now()
	pl, stop, check, err := h.startPoller(ctx, ks, 10*time.Millisecond)
	if err != nil {
		w.Error = err.Error()
		return
	}
	wctx, wcancel := context.WithTimeout(ctx, catchUpTimeout)
	doneAt, err := ks.waitCount(wctx, int64(n), check)
	wcancel()
	self1 := selfCPU()
	dbCPU1, _ := procCPU(h.dbPID)
	stop()
	if err != nil {
		w.Error = err.Error()
		return
	}
	q1, _ := questions(ctx, h.root)
	el := doneAt.Sub(t0).Seconds()
	w.Seconds = el
	w.EventsPerSec = fp(float64(n) / el)
	w.OwnQueriesPerSec = fp(float64(pl.stmts.Load()) / el)
	w.DBQueriesPerSec = fp(float64(q1-q0-1) / el)
	if h.dbPID != 0 {
		w.DBCPUSeconds = fp((dbCPU1 - dbCPU0).Seconds())
		w.DBCPUPercent = fp(100 * (dbCPU1 - dbCPU0).Seconds() / el)
	}
	w.Notes = append(w.Notes, fmt.Sprintf("harness CPU (poller + kfake + end-offset polling) %.1f s; DB CPU %.1f s",
		(self1-self0).Seconds(), num0(w.DBCPUSeconds)))
}

func (h *harness) rocketMQ(ctx context.Context) {
	sink, err := newRMQSink("BENCH_CATCHUP")
	if err != nil {
		h.record(Workload{ID: "catchup-rocketmq-txn1", Name: "RocketMQ catch-up", Error: err.Error()})
	} else {
		spec := catchSpec{
			ID: "catchup-rocketmq-txn1", Kind: "catchup", Name: "outboxd → RocketMQ catch-up, 1-row txns",
			Rows: h.o.RMQRows, TxnRows: 1, Conns: h.o.GenConns, Prefix: "rc-", Sink: sink,
		}
		w, pos0 := h.catchUp(ctx, spec)
		sink.close()
		if pos0 == "" || w.Error != "" {
			h.record(w)
		} else {
			relays := []relayRun{{run: func(ctx context.Context, rep int) Workload {
				return h.outboxdOver(ctx, spec, func() (benchSink, error) { return newRMQSink("BENCH_CATCHUP") }, pos0, rep)
			}}}
			if h.o.want("floor") {
				relays = append(relays, relayRun{run: func(ctx context.Context, rep int) Workload {
					return h.floorRun(ctx, floorRocketMQ, 1, pos0, rep)
				}})
			}
			for _, runs := range rotated(ctx, h.o.Reps, &w, relays) {
				if len(runs) > 0 {
					h.record(median(runs))
				}
			}
		}
	}
	if h.o.want("rocketmq") && ctx.Err() == nil {
		h.steadyOutboxd(ctx, "rocketmq", []int{h.o.RMQRate})
	}
}

// waitDBIdle waits (at most 60 s) until MariaDB's background work after a bulk load (purge,
// flushing) uses under 10% of a core, so the catch-up that follows has the machine to itself.
func (h *harness) waitDBIdle(ctx context.Context) {
	if h.dbPID == 0 {
		return
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c0, err := procCPU(h.dbPID)
		if err != nil {
			return
		}
		time.Sleep(time.Second)
		c1, _ := procCPU(h.dbPID)
		if c1-c0 < 100*time.Millisecond {
			return
		}
	}
}
