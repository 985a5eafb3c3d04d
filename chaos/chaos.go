package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/checkpoint"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkaread"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/replication"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// Options configure Run.
type Options struct {
	Duration time.Duration // fault phase
	Rate     float64       // rows per second
	Seed     int64
	Out      string
	Outboxd  string        // binary; "" builds one
	CatchUp  time.Duration // bound on the final wait
	Verbose  bool
	// Gap is the mean pause between faults (default 1.5s).
	Gap time.Duration
	// HoldScale scales how long each outage or degradation lasts (default 1); a short test
	// run uses less to fit more faults.
	HoldScale float64
	// Instances is how many outboxd run: 1 is one process with a checkpoint file; 2 or more
	// (the default, 2) run with ha on and the mysql store, and the leader faults join the
	// schedule.
	Instances int
	// Lease is ha.lease in the HA world (default 2s).
	Lease time.Duration
	// Replicated runs MariaDB as a primary and a GTID replica (testenv/replication): outboxd
	// reads source.addrs [both] and primary_failover and replica_kill9 join the schedule.
	Replicated bool
	// Delivery is outboxd's delivery mode: DeliveryAtLeastOnce ("" too) or DeliveryExactlyOnce.
	// Exactly-once routes every row to Kafka (the mode refuses RocketMQ routes, so the RocketMQ
	// faults leave the schedule), keeps the checkpoint in a Kafka transaction (checkpoint.store:
	// kafka) and reads the topic back as a read_committed consumer, whose duplicates fail the run.
	Delivery string
	// Faults, when set, restricts the schedule to these kinds (a run hunting one failure).
	Faults []string
	Logf   func(string, ...any)
}

// The delivery modes of Options.Delivery, spelled as outboxd's `delivery` setting.
const (
	DeliveryAtLeastOnce = "at_least_once"
	DeliveryExactlyOnce = "exactly_once"
)

// eoCheckpointTopic is checkpoint.topic in the exactly-once world.
const eoCheckpointTopic = "outboxd_checkpoints"

// rocketmqKinds are the faults of the RocketMQ broker, which the exactly-once world does not
// route to.
var rocketmqKinds = map[string]bool{"rocketmq_outage": true, "rocketmq_send_errors": true}

// faultKinds is every fault the scheduler picks from; each round uses all of them once, in a
// seeded random order, so a short run still sees each kind.
var faultKinds = []string{
	"outboxd_kill9", "outboxd_sigterm",
	"mariadb_restart", "mariadb_kill9",
	"kafka_outage", "kafka_produce_errors",
	"rocketmq_outage", "rocketmq_send_errors",
	"mysql_proxy_reset", "mysql_proxy_drop_new", "mysql_proxy_latency", "mysql_proxy_blackhole",
	"kafka_proxy_reset", "kafka_proxy_drop_new", "kafka_proxy_latency", "kafka_proxy_blackhole",
}

type world struct {
	o   Options
	srv *mariadb.Server // the primary
	// A replicated world: the pair, its servers in start order and a pool to each; srv and db
	// are the primary's.
	pair        *replication.Pair
	servers     [2]*mariadb.Server
	dbs         [2]*sql.DB
	gen         *generator
	switchovers int
	// leftServer1 is set when the first switchover came before any crash failover: server 1,
	// outboxd's first candidate and the first primary, then refused it for a while, so outboxd
	// must have streamed from server 2.
	leftServer1 bool
	// crashFailovers counts primary_crash_failover faults; discarded is the event ids of rows
	// they lost with the dead primary (committed there, never replicated).
	crashFailovers int
	discarded      map[string]bool
	kafka          *kafka
	rmq            *rocketmq.Cluster
	obds           []*outboxd // each with its own MariaDB proxy
	runs           *runLog
	watch          *watcher // nil in the single-instance world
	db             *sql.DB
	dir            string

	stopWatch context.CancelFunc
	watchWG   sync.WaitGroup

	mu               sync.Mutex
	takeovers        []takeover
	takeoverTimeouts int
	leaderless       int // leader faults skipped for want of a leader
}

// ha reports whether this is the HA world.
func (w *world) ha() bool { return w.o.Instances > 1 }

// exactlyOnce reports whether outboxd runs with delivery: exactly_once.
func (w *world) exactlyOnce() bool { return w.o.Delivery == DeliveryExactlyOnce }

// kinds is the schedule's fault kinds for this world, for its round-th round (from 0).
func (w *world) kinds(round int) []string {
	ks := w.allKinds(round)
	if len(w.o.Faults) == 0 {
		return ks
	}
	only := map[string]bool{}
	for _, k := range w.o.Faults {
		only[k] = true
	}
	return slices.DeleteFunc(ks, func(k string) bool { return !only[k] })
}

// allKinds is every fault kind of this world, for its round-th round (from 0).
func (w *world) allKinds(round int) []string {
	var ks []string
	for _, k := range faultKinds {
		if !w.exactlyOnce() || !rocketmqKinds[k] {
			ks = append(ks, k)
		}
	}
	if w.ha() {
		ks = append(ks, haKinds...)
	}
	if w.pair != nil {
		for _, k := range replKinds {
			if k != "primary_crash_failover" || round%crashFailoverEvery == 0 {
				ks = append(ks, k)
			}
		}
	}
	return ks
}

// ensure restarts every instance that exited by itself (a superseded leader comes back as a
// standby).
func (w *world) ensure() error {
	var first error
	for _, o := range w.obds {
		if err := o.ensure(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Run sets up the world, runs the generator and the fault schedule for o.Duration, waits for
// outboxd to catch up and verifies. It blocks; an error means the harness itself failed (the
// report then is nil). Everything it started is stopped before it returns.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Rate <= 0 {
		o.Rate = 200
	}
	if o.CatchUp <= 0 {
		o.CatchUp = 3 * time.Minute
	}
	if o.Gap <= 0 {
		o.Gap = 1500 * time.Millisecond
	}
	if o.HoldScale <= 0 {
		o.HoldScale = 1
	}
	if o.Instances <= 0 {
		o.Instances = 2
	}
	if o.Lease <= 0 {
		o.Lease = 2 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	switch o.Delivery {
	case "":
		o.Delivery = DeliveryAtLeastOnce
	case DeliveryAtLeastOnce, DeliveryExactlyOnce:
	default:
		return nil, fmt.Errorf("delivery %q: use %s or %s", o.Delivery, DeliveryAtLeastOnce, DeliveryExactlyOnce)
	}
	dir, err := os.MkdirTemp("", "outboxd-chaos-")
	if err != nil {
		return nil, err
	}
	w := &world{o: o, dir: dir, discarded: map[string]bool{}}
	defer w.close()
	if err := w.setup(ctx); err != nil {
		return nil, err
	}
	if len(o.Faults) > 0 {
		known := map[string]bool{}
		for r := 0; r < crashFailoverEvery; r++ {
			for _, k := range w.allKinds(r) {
				known[k] = true
			}
		}
		for _, k := range o.Faults {
			if !known[k] {
				return nil, fmt.Errorf("fault kind %q is not one of this world's", k)
			}
		}
	}
	for _, ob := range w.obds {
		o.Logf("outboxd %s: mariadb proxy %s, admin %q, log %s", ob.name, ob.myPx.Addr(), ob.admin, ob.logPath)
	}
	o.Logf("world up: mariadb %s, kafka %s (proxy %s), rocketmq %s", w.srv.Addr, w.kafka.realAddr(), w.kafka.proxy.Addr(), w.rmq.NameServer())

	cons, err := newKafkaConsumer(w.kafka.realAddr(), w.exactlyOnce(), filepath.Join(dir, "consumer.log"))
	if err != nil {
		return nil, err
	}
	defer cons.close()
	cctx, stopCons := context.WithCancel(context.Background())
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() { defer cwg.Done(); cons.run(cctx) }()
	defer func() { stopCons(); cwg.Wait() }()

	gen := &generator{db: w.db, rate: o.Rate, workers: 4, keysPer: 3, seed: o.Seed,
		rows: map[string]*genRow{}, txns: map[string]int{}, darkEvery: 40}
	w.gen = gen
	gctx, stopGen := context.WithCancel(ctx)
	var gwg sync.WaitGroup
	gwg.Add(1)
	go func() { defer gwg.Done(); gen.run(gctx) }()

	rng := rand.New(rand.NewSource(o.Seed))
	faults := map[string]int{}
	began := time.Now()
	fctx, stopFaults := context.WithTimeout(ctx, o.Duration)
	var round []string
	rounds := 0
	for fctx.Err() == nil {
		sleepCtx(fctx, time.Duration(rng.Int63n(int64(2*o.Gap))))
		if fctx.Err() != nil {
			break
		}
		if len(round) == 0 {
			round = w.kinds(rounds)
			rounds++
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		kind := round[0]
		round = round[1:]
		if o.Verbose {
			o.Logf("fault %s", kind)
		}
		if w.watch != nil {
			w.watch.setFault(kind)
		}
		err := w.inject(fctx, rng, kind)
		if w.watch != nil {
			w.watch.setFault("")
		}
		if err != nil {
			stopFaults()
			stopGen()
			gwg.Wait()
			return nil, fmt.Errorf("fault %s: %w", kind, err)
		}
		faults[kind]++
		if err := w.ensure(); err != nil {
			o.Logf("restart outboxd: %v", err)
		}
	}
	stopFaults()
	faultPhase := time.Since(began)
	stopGen()
	gwg.Wait()
	o.Logf("faults stopped after %s; healing and waiting for outboxd to catch up", faultPhase.Round(time.Second))

	if err := w.heal(ctx); err != nil {
		return nil, fmt.Errorf("heal: %w", err)
	}
	truth, err := w.committedIDs(ctx)
	if err != nil {
		return nil, err
	}
	splitDark(truth) // never in the binlog: judged apart (lifecycle.go)
	catchStart := time.Now()
	deadline := time.Now().Add(o.CatchUp)
	var got deliveries
	for {
		_ = w.ensure()
		got = collect(cons, w.rmq)
		missing := 0
		for id := range truth {
			if _, ok := got.first[id]; !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			o.Logf("catch-up: %d missing after %s", missing, time.Since(catchStart).Round(100*time.Millisecond))
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	// A short settle so late duplicates are counted too.
	sleepCtx(ctx, 1500*time.Millisecond)
	got = collect(cons, w.rmq)
	// Cleanup goes on deleting during the catch-up: wait for it to take what was delivered,
	// then count every row it deleted as committed (the trigger's log is the truth of those).
	leftDelivered := w.drainCleanup(ctx, cons, time.Minute)
	got = collect(cons, w.rmq)
	deleted, err := w.deletedIDs(ctx)
	if err != nil {
		return nil, err
	}
	for id := range deleted {
		if !strings.HasPrefix(id, darkPrefix) {
			truth[id] = true
		}
	}

	rep := verify(gen, truth, w.discarded, got, w.runs.snapshot())
	rep.Delivery = o.Delivery
	w.rereadLost(ctx, rep, truth, got, cons)
	rep.LeftDelivered = leftDelivered
	w.lifecycleVerdict(ctx, rep, deleted, got, began.Add(-time.Minute))
	rep.PeriodicReconciles = w.periodicReconciles()
	rep.Seed = o.Seed
	rep.DurationS = faultPhase.Seconds()
	rep.CatchUpS = time.Since(catchStart).Seconds()
	rep.Rate = o.Rate
	rep.Faults = faults
	for _, n := range faults {
		rep.FaultsTotal += n
	}
	rep.Instances = len(w.obds)
	for _, ob := range w.obds {
		unexpected, superseded, lastExit := ob.counts()
		rep.OutboxdUnexpectedExits += unexpected
		rep.OutboxdSupersededExits += superseded
		if lastExit != "" {
			rep.OutboxdLastUnexpectedExit = ob.name + ": " + lastExit
		}
		rep.OutboxdLogs = append(rep.OutboxdLogs, ob.logPath)
		// Proof that outboxd's traffic really went through the proxies.
		for _, p := range ob.mysqlProxies() {
			rep.MySQLProxyConns += p.Accepted()
		}
	}
	if w.pair != nil {
		w.replicaReport(ctx, rep)
	}
	rep.KafkaProxyConns = w.kafka.proxy.Accepted()
	if w.watch != nil {
		w.haReport(rep)
	}
	if !rep.OK() || rep.TakeoverTimeouts > 0 || rep.Leaderless > 0 || rep.OutboxdUnexpectedExits > 0 {
		rep.KeptDir = dir
		w.dir = "" // keep the logs for a look
	}
	return rep, nil
}

func (w *world) setup(ctx context.Context) error {
	var err error
	if w.o.Replicated {
		if err := w.setupPair(ctx); err != nil {
			return err
		}
	} else {
		w.srv, err = mariadb.Start(ctx, mariadb.Options{})
		if err != nil {
			return fmt.Errorf("start MariaDB (apt-get install mariadb-server): %w", err)
		}
		w.db, err = w.srv.DB(ctx, "")
		if err != nil {
			return err
		}
		w.db.SetMaxOpenConns(8)
	}
	for _, q := range []string{
		"CREATE DATABASE " + schema,
		`CREATE TABLE ` + schema + `.outbox_event (
  id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL UNIQUE, biz_key VARCHAR(64) NULL,
  topic VARCHAR(128) NULL, event_type VARCHAR(64) NULL, payload LONGBLOB NULL, headers JSON NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), INDEX (created_at))`,
	} {
		if _, err := w.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if err := w.setupLifecycle(ctx); err != nil {
		return err
	}
	ckTable := schema + ".outboxd_checkpoint"
	if w.ha() {
		if _, err := w.db.ExecContext(ctx, checkpoint.CreateTableSQL(ckTable)); err != nil {
			return fmt.Errorf("create the checkpoint table: %w", err)
		}
	}
	var pos string
	if err := w.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	if w.kafka, err = newKafka(filepath.Join(w.dir, "kafka")); err != nil {
		return err
	}
	if w.exactlyOnce() {
		// As `outboxd check` creates it; kfake keeps it across restarts (DataDir).
		if err := w.kafka.createTopic(eoCheckpointTopic, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
			return fmt.Errorf("create %s: %w", eoCheckpointTopic, err)
		}
	}
	if w.rmq, err = rocketmq.Start(rocketmq.Options{Topics: []string{rmqTopic}}); err != nil {
		return err
	}
	bin := w.o.Outboxd
	if bin == "" {
		if bin, err = buildOutboxd(ctx, w.dir); err != nil {
			return err
		}
	}
	w.runs = &runLog{}
	for i := 0; i < w.o.Instances; i++ {
		name := string(rune('a' + i))
		ob := &outboxd{name: name, bin: bin, logPath: filepath.Join(w.dir, "outboxd-"+name+".log"), logf: w.o.Logf,
			clientID: "outboxd-" + name}
		if ob.myPx, err = faultproxy.New(w.srv.Addr); err != nil {
			return err
		}
		w.obds = append(w.obds, ob) // closed by close from here on
		if w.pair != nil {
			if err := w.sourceProxies(ob); err != nil {
				return err
			}
		}
		// One config for all but the admin address, the client id and the path to MariaDB.
		store := fmt.Sprintf("path: %s", filepath.Join(w.dir, "checkpoint.json"))
		if w.ha() {
			store = fmt.Sprintf("store: mysql, table: %s, name: chaos%s", ckTable, w.writerYAML(ob))
		}
		if w.exactlyOnce() {
			store = fmt.Sprintf("store: kafka, name: chaos, sink: kafka, topic: %s", eoCheckpointTopic)
			if w.ha() {
				store += w.writerYAML(ob) // the leader lock's server
			}
		}
		ck := fmt.Sprintf("checkpoint: {%s, interval: 200ms}\nadmin: {listen: \"\"}\n", store)
		if w.ha() {
			if ob.admin, err = freeAddr(); err != nil {
				return err
			}
			ck = fmt.Sprintf("checkpoint: {%s, interval: 200ms}\nha: {enabled: true, lease: %s}\nadmin: {listen: %q}\n",
				store, w.o.Lease, ob.admin)
		} else {
			ob.runs = w.runs
		}
		cfg := fmt.Sprintf(`source:
  flavor: mariadb
%s  user: root
  password: ""
  server_id: 4242
  start: %q
tables:
  - table: %s.outbox_event
%ssinks:
  kafka: {type: kafka, brokers: [%q], timeout: 2s, client_id: %s}
%sretry: {initial: 50ms, max: 1s}
%slog: {level: info, format: json}
`, w.sourceYAML(ob), pos, schema, w.lifecycleYAML(), w.kafka.proxy.Addr(), ob.clientID, w.routesYAML(), ck)
		ob.cfg = filepath.Join(w.dir, "outboxd-"+name+".yaml")
		if err := os.WriteFile(ob.cfg, []byte(cfg), 0o600); err != nil {
			return err
		}
	}
	if !w.ha() {
		return w.obds[0].start("")
	}
	w.watch = &watcher{runs: w.runs}
	wctx, stop := context.WithCancel(context.Background())
	w.stopWatch = stop
	for _, ob := range w.obds {
		w.watchWG.Add(1)
		go func() { defer w.watchWG.Done(); w.watch.watch(wctx, ob) }()
	}
	// The first instance leads; the others start as standbys once it does.
	if err := w.obds[0].start(""); err != nil {
		return err
	}
	if w.leader(ctx, time.Minute) == nil {
		return fmt.Errorf("outboxd a did not become leader within a minute (log %s)", w.obds[0].logPath)
	}
	for _, ob := range w.obds[1:] {
		if err := ob.start(""); err != nil {
			return err
		}
	}
	return nil
}

// routesYAML is the rmq sink (at least once) and the routes: topic kafka.* to Kafka, rmq.* to
// RocketMQ; exactly-once sends both to Kafka (the odd keys too), since the mode refuses
// RocketMQ routes. The top-level delivery setting comes with them.
func (w *world) routesYAML() string {
	rmqSink := fmt.Sprintf("  rmq: {type: rocketmq, nameservers: [%q], send_timeout: 1s}\n", w.rmq.NameServer())
	rmqRoute := fmt.Sprintf("    sink: rmq\n    topic: %s\n    tag: \"{event_type}\"\n", rmqTopic)
	delivery := ""
	if w.exactlyOnce() {
		rmqSink, delivery = "", "delivery: exactly_once\n"
		rmqRoute = fmt.Sprintf("    sink: kafka\n    topic: %s\n", kafkaTopic)
	}
	return rmqSink + fmt.Sprintf("routes:\n  - match: {topic: \"kafka.*\"}\n    sink: kafka\n    topic: %s\n", kafkaTopic) +
		"  - match: {topic: \"rmq.*\"}\n" + rmqRoute + delivery
}

func (w *world) close() {
	if w.stopWatch != nil {
		w.stopWatch()
		w.watchWG.Wait()
	}
	for _, ob := range w.obds {
		ob.stop(syscall.SIGKILL)
		for _, p := range ob.mysqlProxies() {
			p.Close()
		}
	}
	if w.kafka != nil {
		w.kafka.close()
	}
	if w.rmq != nil {
		w.rmq.Close()
	}
	w.closeDBs()
	if w.db != nil {
		w.db.Close()
	}
	if w.pair != nil {
		w.pair.Close()
	} else if w.srv != nil {
		w.srv.Close()
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
	}
}

// between returns a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int63n(int64(hi-lo)))
}

// inject applies one fault and undoes it before returning (outages last a random while).
func (w *world) inject(ctx context.Context, rng *rand.Rand, kind string) error {
	between := func(rng *rand.Rand, lo, hi time.Duration) time.Duration {
		return time.Duration(float64(between(rng, lo, hi)) * w.o.HoldScale)
	}
	if w.ha() {
		if ok, err := w.injectHA(ctx, rng, kind, func(lo, hi time.Duration) time.Duration { return between(rng, lo, hi) }); ok {
			return err
		}
	}
	if ok, err := w.injectRepl(ctx, rng, kind, func(lo, hi time.Duration) time.Duration { return between(rng, lo, hi) }); ok {
		return err
	}
	obd := w.obds[0]
	switch kind {
	case "outboxd_kill9":
		obd.stop(syscall.SIGKILL)
		sleepCtx(ctx, between(rng, 10*time.Millisecond, 1500*time.Millisecond))
		return obd.start("kill9")
	case "outboxd_sigterm":
		if !obd.stop(syscall.SIGTERM) {
			w.o.Logf("outboxd did not stop within 30s of SIGTERM; killed")
		}
		return obd.start("sigterm")
	case "mariadb_restart":
		return w.restartPrimary(context.Background())
	case "mariadb_kill9":
		if err := w.srv.Kill(); err != nil {
			return err
		}
		sleepCtx(ctx, between(rng, 100*time.Millisecond, 2*time.Second))
		return w.restartPrimary(context.Background())
	case "kafka_outage":
		w.kafka.stop()
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 4*time.Second))
		return w.kafka.start(false)
	case "kafka_produce_errors":
		// 6 NOT_LEADER_FOR_PARTITION, 7 REQUEST_TIMED_OUT: retryable, nothing stored.
		codes := []int16{6, 7}
		w.kafka.failProduces(1+rng.Intn(8), codes[rng.Intn(len(codes))])
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 2*time.Second))
	case "rocketmq_outage":
		w.rmq.StopBroker()
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 4*time.Second))
		return w.rmq.StartBroker()
	case "rocketmq_send_errors":
		var f rocketmq.Fault
		switch rng.Intn(4) {
		case 0:
			f = rocketmq.Fault{Code: 2} // SYSTEM_BUSY, not stored
		case 1:
			f = rocketmq.Fault{Code: 10, Store: true} // FLUSH_DISK_TIMEOUT: stored, not SEND_OK
		case 2:
			f = rocketmq.Fault{Delay: 1500 * time.Millisecond, Store: true} // stored, answer after the timeout
		default:
			f = rocketmq.Fault{Drop: true, Store: true} // stored, connection dropped
		}
		f.Topic, f.Count = rmqTopic, 1+rng.Intn(6)
		remove := w.rmq.Inject(f)
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 3*time.Second))
		remove()
	case "mysql_proxy_reset":
		for _, p := range w.primaryPaths() {
			p.ResetAll()
		}
	case "kafka_proxy_reset":
		w.kafka.proxy.ResetAll()
	case "mysql_proxy_drop_new", "kafka_proxy_drop_new":
		ps := w.proxiesOf(kind)
		for _, p := range ps {
			p.SetMode(faultproxy.DropNew)
			p.ResetAll() // so the client has to reconnect into the refusal
		}
		sleepCtx(ctx, between(rng, 300*time.Millisecond, 3*time.Second))
		for _, p := range ps {
			p.SetMode(faultproxy.Pass)
		}
	case "mysql_proxy_latency", "kafka_proxy_latency":
		ps := w.proxiesOf(kind)
		d := between(rng, 20*time.Millisecond, 300*time.Millisecond)
		for _, p := range ps {
			p.SetLatency(d)
		}
		sleepCtx(ctx, between(rng, time.Second, 4*time.Second))
		for _, p := range ps {
			p.SetLatency(0)
		}
	case "mysql_proxy_blackhole", "kafka_proxy_blackhole":
		ps := w.proxiesOf(kind)
		for _, p := range ps {
			p.SetMode(faultproxy.Blackhole)
		}
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 5*time.Second))
		for _, p := range ps {
			p.SetMode(faultproxy.Pass)
		}
	default:
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	return nil
}

// proxiesOf is the proxies a mysql_* or kafka_* proxy fault acts on: every instance's path to
// MariaDB (a network fault between the relays and the database), or the one Kafka proxy.
func (w *world) proxiesOf(kind string) []*faultproxy.Proxy {
	if kind[:5] == "mysql" {
		return w.primaryPaths()
	}
	return []*faultproxy.Proxy{w.kafka.proxy}
}

// myProxies is every instance's every path to MariaDB.
func (w *world) myProxies() []*faultproxy.Proxy {
	var ps []*faultproxy.Proxy
	for _, ob := range w.obds {
		ps = append(ps, ob.mysqlProxies()...)
	}
	return ps
}

// heal undoes every fault: proxies pass, brokers and MariaDB up, outboxd running.
func (w *world) heal(ctx context.Context) error {
	for _, p := range append(w.myProxies(), w.kafka.proxy) {
		p.SetMode(faultproxy.Pass)
		p.SetLatency(0)
	}
	if err := w.kafka.start(false); err != nil {
		return err
	}
	if err := w.rmq.StartBroker(); err != nil {
		return err
	}
	if !w.srv.Running() {
		if err := w.restartPrimary(ctx); err != nil {
			return err
		}
	}
	if err := w.healPair(ctx); err != nil {
		return err
	}
	for _, ob := range w.obds {
		ob.freeze(false)
	}
	return w.ensure()
}

// committedIDs reads the primary's outbox table: what the binlog holds is the truth of what
// committed. It tries for 30 s (the primary may be restarting).
func (w *world) committedIDs(ctx context.Context) (map[string]bool, error) {
	var lastErr error
	for i := 0; i < 30; i++ {
		out, err := mariadb.EventIDs(ctx, w.db, outboxTable)
		if err == nil {
			return out, nil
		}
		lastErr = err
		sleepCtx(ctx, time.Second)
	}
	return nil, fmt.Errorf("read the outbox table: %w", lastErr)
}

// kafkaConsumer reads the Kafka topic from offset 0, directly from the broker (its dialer
// bypasses the fault proxy the broker advertises), and stamps each record's arrival.
type kafkaConsumer struct {
	cl *kgo.Client
	mu sync.Mutex
	rs []delivery
}

// directClient is a client of the broker at real that never goes through the proxy: kfake
// advertises the proxy's address, and every dial goes to real instead.
func directClient(real string, opts ...kgo.Opt) (*kgo.Client, error) {
	var d net.Dialer
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(real), kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, real)
	})}, opts...)...)
}

func newKafkaConsumer(real string, readCommitted bool, logPath string) (*kafkaConsumer, error) {
	opts := []kgo.Opt{kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	if logPath != "" {
		// The client's own account (offset resets, data loss it detected, epoch validation),
		// for a run that lost rows.
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("kafka consumer log: %w", err)
		}
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(lf, kgo.LogLevelInfo, nil)))
	}
	if readCommitted {
		// What a consumer of an exactly-once relay reads: records of aborted transactions
		// (a killed or fenced run's) are skipped, open ones held back.
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := directClient(real, opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	return &kafkaConsumer{cl: cl}, nil
}

func (c *kafkaConsumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		f := c.cl.PollFetches(ctx)
		now := time.Now()
		var batch []delivery
		f.EachRecord(func(r *kgo.Record) {
			batch = append(batch, deliveryOf("kafka", int(r.Partition), r.Offset, kafkaread.EventID(r), r.Value, now))
		})
		c.mu.Lock()
		c.rs = append(c.rs, batch...)
		c.mu.Unlock()
	}
}

func (c *kafkaConsumer) snapshot() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.rs...)
}

func (c *kafkaConsumer) close() { c.cl.Close() }
