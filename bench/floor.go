package main

// The floor relay: a measuring instrument, not a relay anyone should run. It is the least a relay
// of outboxd's design does on this machine: go-mysql reading the binlog (configured as outboxd's
// reader, see syncerConfig) and a producer sending each outbox row as it is decoded (key biz_key,
// value payload, one event_id header, acks=all), with no routing, no transaction assembly, no
// tracker, no checkpoint and no retries (any failure ends it). It runs as this binary re-executed
// with OUTBOXD_BENCH_FLOOR set, so /proc CPU is its own, exactly like outboxd's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rlog "github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// floorEnv carries the floor relay's JSON config; its presence makes main run the floor relay.
const floorEnv = "OUTBOXD_BENCH_FLOOR"

// Floor relay clients.
const (
	floorFranz    = "franz-go"
	floorKafkaGo  = "kafka-go"
	floorRocketMQ = "rocketmq"
)

// floorConfig is what the floor relay process needs.
type floorConfig struct {
	Client     string   `json:"client"` // floorFranz, floorKafkaGo or floorRocketMQ
	Addr       string   `json:"addr"`   // MariaDB host:port
	ServerID   uint32   `json:"server_id"`
	Start      string   `json:"start"` // GTID set
	Schema     string   `json:"schema"`
	Table      string   `json:"table"`
	Brokers    []string `json:"brokers,omitempty"`
	NameServer string   `json:"nameserver,omitempty"`
	Topic      string   `json:"topic"`
}

// Column positions in bench.outbox_event (schemaSQL): the floor reads the bench's own table and
// needs no column names.
const (
	colEventID = 1
	colBizKey  = 2
	colPayload = 5
)

// floorMaxBuffered bounds the rows read but not yet acknowledged by the kafka-go and RocketMQ
// floors (franz-go's default MaxBufferedRecords), so the reader waits for the producer as
// outboxd's tracker makes it wait.
const floorMaxBuffered = 10000

// franzMaxBuffered is the franz-go floor's MaxBufferedRecords: ten times franz-go's default, so
// the reader never waits for the producer while a partition's request is in flight (measured in
// issue 24: 10,000 held the 100-row catch-up at 200k events/s, 100,000 reached 230-268k).
const franzMaxBuffered = 100_000

// floorRow is one outbox row as the producer needs it.
type floorRow struct{ eventID, key, value []byte }

// floorProducer sends rows. send blocks only for backpressure; failures are reported on the
// channel err returns and end the relay.
type floorProducer interface {
	send(ctx context.Context, r floorRow)
	errc() <-chan error
	close()
}

// serveFloor is the child's side: relay until SIGTERM, stdin closing, or a failure (exit 1).
// floorProfileEnv names a file for the floor relay's CPU profile ("%p" is its process id).
const floorProfileEnv = "BENCH_FLOOR_CPUPROFILE"

func serveFloor(cfgJSON string) int {
	var cfg floorConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "floor relay: config:", err)
		return 2
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200) // outboxd's own GC setting (cmd/outboxd tuneGC), so GC costs the floor no more than it
	}
	if path := os.Getenv(floorProfileEnv); path != "" { // to set beside outboxd's OUTBOXD_CPUPROFILE
		path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() { // the harness closing our stdin (or dying) ends the relay
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		cancel(nil)
	}()
	if err := runFloor(ctx, cfg); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "floor relay:", err)
		return 1
	}
	return 0
}

func runFloor(ctx context.Context, cfg floorConfig) error {
	var p floorProducer
	var err error
	switch cfg.Client {
	case floorFranz:
		p, err = newFranzFloor(cfg)
	case floorKafkaGo:
		p, err = newKafkaGoFloor(ctx, cfg)
	case floorRocketMQ:
		p, err = newRMQFloor(cfg)
	default:
		err = fmt.Errorf("unknown client %q", cfg.Client)
	}
	if err != nil {
		return err
	}
	defer p.close()
	scfg, err := syncerConfig(cfg.Addr, cfg.ServerID, cfg.Schema, cfg.Table)
	if err != nil {
		return err
	}
	set, err := mysql.ParseMariadbGTIDSet(cfg.Start)
	if err != nil {
		return fmt.Errorf("parse start %q: %w", cfg.Start, err)
	}
	return eachEvent(ctx, scfg, set, func(ev *replication.BinlogEvent) error {
		select {
		case err := <-p.errc():
			return err
		default:
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || re.Type() != replication.EnumRowsEventTypeInsert || re.Table == nil ||
			string(re.Table.Table) != cfg.Table || string(re.Table.Schema) != cfg.Schema {
			return nil
		}
		for _, row := range re.Rows {
			if len(row) <= colPayload {
				return fmt.Errorf("row of %d columns: not bench.outbox_event's layout", len(row))
			}
			p.send(ctx, floorRow{eventID: asBytes(row[colEventID]), key: asBytes(row[colBizKey]), value: asBytes(row[colPayload])})
		}
		return nil
	})
}

// asBytes is a decoded column's bytes (go-mysql gives VARCHAR as string, TEXT/JSON as []byte;
// the []byte aliases the event's own packet, which go-mysql does not reuse).
func asBytes(v any) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	case nil:
		return nil
	default:
		return fmt.Append(nil, x)
	}
}

// failOnce keeps the first failure of a producer for its errc.
type failOnce struct {
	ch   chan error
	once sync.Once
}

func newFailOnce() failOnce            { return failOnce{ch: make(chan error, 1)} }
func (f *failOnce) fail(err error)     { f.once.Do(func() { f.ch <- err }) }
func (f *failOnce) errc() <-chan error { return f.ch }

// franzFloor produces with franz-go: acks=all, no linger (franz-go's default linger is 10 ms, which
// no latency comparison could carry), no compression, its default murmur2 key partitioner and
// idempotence.
type franzFloor struct {
	cl *kgo.Client
	failOnce
}

func newFranzFloor(cfg floorConfig) (*franzFloor, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// outboxd's sink sends uncompressed batches (the bench configures no compression);
		// franz-go's default would be snappy.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(franzMaxBuffered),
		// Everything else is franz-go's default: idempotent production (up to 5 requests in
		// flight per broker), batches up to 1,000,012 bytes, the sticky key partitioner
		// (murmur2 of the key, as outboxd's sink and Kafka's Java client place keys).
	)
	if err != nil {
		return nil, err
	}
	return &franzFloor{cl: cl, failOnce: newFailOnce()}, nil
}

func (f *franzFloor) send(ctx context.Context, r floorRow) {
	rec := &kgo.Record{Key: r.key, Value: r.value, Headers: []kgo.RecordHeader{{Key: "event_id", Value: r.eventID}}}
	f.cl.Produce(ctx, rec, f.promise)
}

// promise is every record's callback: one method value, not a closure per record.
func (f *franzFloor) promise(_ *kgo.Record, err error) {
	if err != nil {
		f.fail(fmt.Errorf("franz-go produce: %w", err))
	}
}

func (f *franzFloor) close() { f.cl.Close() }

// gate bounds the rows in flight (floorMaxBuffered); acquire blocks while it is full, until
// open (a failure or the end: the reader must get to see the failure, not wait forever).
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int
	opened bool
}

func newGate() *gate { g := &gate{}; g.cond = sync.NewCond(&g.mu); return g }
func (g *gate) acquire() {
	g.mu.Lock()
	for g.n >= floorMaxBuffered && !g.opened {
		g.cond.Wait()
	}
	g.n++
	g.mu.Unlock()
}
func (g *gate) release(k int) {
	g.mu.Lock()
	g.n -= k
	g.mu.Unlock()
	g.cond.Broadcast()
}
func (g *gate) open() {
	g.mu.Lock()
	g.opened = true
	g.mu.Unlock()
	g.cond.Broadcast()
}

// laneQueue is the rows waiting for one partition (or queue); its worker takes all of them at once.
type laneQueue[T any] struct {
	mu   sync.Mutex
	recs []T
	wake chan struct{}
}

func newLaneQueue[T any]() *laneQueue[T] { return &laneQueue[T]{wake: make(chan struct{}, 1)} }

func (q *laneQueue[T]) push(v T) {
	q.mu.Lock()
	q.recs = append(q.recs, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take waits for rows and returns at most max of them (all of them when max is 0), or nil when ctx ends.
func (q *laneQueue[T]) take(ctx context.Context, max int) []T {
	for {
		q.mu.Lock()
		if n := len(q.recs); n > 0 {
			if max == 0 || n <= max {
				out := q.recs
				q.recs = nil
				q.mu.Unlock()
				return out
			}
			out := append([]T(nil), q.recs[:max]...)
			q.recs = append(q.recs[:0], q.recs[max:]...)
			q.mu.Unlock()
			return out
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-q.wake:
		}
	}
}

// kafkaGoFloor produces with kafka-go's Client.Produce, as outboxd's sink does: murmur2 placement,
// one ProduceRequest (acks=all) at a time per partition carrying every row that queued for it
// while the previous one was in flight (about 900 KiB at most, under kfake's 1 MiB batch limit).
type kafkaGoFloor struct {
	client *kafkago.Client
	tr     *kafkago.Transport
	topic  string
	parts  []int
	queues []*laneQueue[kafkago.Record]
	gate   *gate
	stop   context.CancelFunc
	wg     sync.WaitGroup
	failOnce
}

const kafkaGoFloorBatch = 850 // 1 KiB records per request, under 1 MiB

func newKafkaGoFloor(ctx context.Context, cfg floorConfig) (*kafkaGoFloor, error) {
	tr := &kafkago.Transport{ClientID: "floor-relay"}
	cl := &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{cfg.Topic}})
	if err != nil {
		return nil, fmt.Errorf("kafka-go metadata: %w", err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name == cfg.Topic {
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("kafka-go metadata: no partitions for %s", cfg.Topic)
	}
	wctx, stop := context.WithCancel(context.Background())
	f := &kafkaGoFloor{client: cl, tr: tr, topic: cfg.Topic, parts: parts, gate: newGate(), stop: stop, failOnce: newFailOnce()}
	for range parts {
		f.queues = append(f.queues, newLaneQueue[kafkago.Record]())
	}
	for i, p := range parts {
		f.wg.Add(1)
		go f.worker(wctx, p, f.queues[i])
	}
	return f, nil
}

func (f *kafkaGoFloor) send(_ context.Context, r floorRow) {
	f.gate.acquire()
	p := kafkago.Murmur2Balancer{Consistent: true}.Balance(kafkago.Message{Key: r.key}, f.parts...)
	f.queues[p].push(kafkago.Record{
		Key: kafkago.NewBytes(r.key), Value: kafkago.NewBytes(r.value),
		Headers: []kafkago.Header{{Key: "event_id", Value: r.eventID}},
	})
}

func (f *kafkaGoFloor) worker(ctx context.Context, partition int, q *laneQueue[kafkago.Record]) {
	defer f.wg.Done()
	for {
		recs := q.take(ctx, kafkaGoFloorBatch)
		if recs == nil {
			return
		}
		res, err := f.client.Produce(ctx, &kafkago.ProduceRequest{
			Topic: f.topic, Partition: partition, RequiredAcks: kafkago.RequireAll,
			Records: kafkago.NewRecordReader(recs...),
		})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		if err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("kafka-go produce to partition %d: %w", partition, err))
			}
			f.gate.open()
			return
		}
		f.gate.release(len(recs))
	}
}

func (f *kafkaGoFloor) close() {
	f.stop()
	f.gate.open() // unblock a reader waiting for the gate
	f.wg.Wait()
	f.tr.CloseIdleConnections()
}

// rmqFloor sends with the plain rocketmq-client-go producer, one SendSync per message and one in
// flight per queue (what keeps a key's order), the queue being FNV-1a of the key modulo the queues,
// as outboxd's sink places it.
type rmqFloor struct {
	p      rmq.Producer
	topic  string
	queues []*laneQueue[*primitive.Message]
	gate   *gate
	stop   context.CancelFunc
	wg     sync.WaitGroup
	failOnce
}

// rmqSelector picks the queue the key hashes to, so a lane is a queue.
type rmqSelector struct{}

func (rmqSelector) Select(m *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	return mqs[int(fnv32a(m.GetShardingKey())%uint32(len(mqs)))]
}

func fnv32a(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

func newRMQFloor(cfg floorConfig) (*rmqFloor, error) {
	rlog.SetLogLevel("error")
	p, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{cfg.NameServer})),
		producer.WithGroupName("floor-relay"),
		producer.WithInstanceName(fmt.Sprintf("floor-relay-%d", os.Getpid())),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(10*time.Second),
		producer.WithQueueSelector(rmqSelector{}),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq producer start: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	f := &rmqFloor{p: p, topic: cfg.Topic, gate: newGate(), stop: stop, failOnce: newFailOnce()}
	for i := 0; i < rmqQueues; i++ {
		q := newLaneQueue[*primitive.Message]()
		f.queues = append(f.queues, q)
		f.wg.Add(1)
		go f.worker(wctx, q)
	}
	return f, nil
}

func (f *rmqFloor) send(_ context.Context, r floorRow) {
	f.gate.acquire()
	m := primitive.NewMessage(f.topic, r.value)
	m.WithShardingKey(string(r.key))
	m.WithKeys([]string{string(r.eventID)})
	f.queues[fnv32a(string(r.key))%rmqQueues].push(m)
}

func (f *rmqFloor) worker(ctx context.Context, q *laneQueue[*primitive.Message]) {
	defer f.wg.Done()
	for {
		msgs := q.take(ctx, 0)
		if msgs == nil {
			return
		}
		for _, m := range msgs {
			res, err := f.p.SendSync(ctx, m)
			if err == nil && res.Status != primitive.SendOK {
				err = fmt.Errorf("status %d", res.Status)
			}
			if err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("rocketmq send: %w", err))
				}
				f.gate.open()
				return
			}
			f.gate.release(1)
		}
	}
}

func (f *rmqFloor) close() {
	f.stop()
	f.gate.open()
	f.wg.Wait()
	_ = f.p.Shutdown()
}

// startFloor starts the floor relay process for cfg, its stderr going to dir/floor.log. It does not
// wait for readiness: like outboxd's, its clock runs from the process start.
func startFloor(dir string, cfg floorConfig) (*outboxdProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorEnv+"="+string(b))
	if _, err := cmd.StdinPipe(); err != nil { // closed by the harness's exit: the relay ends
		return nil, err
	}
	p, err := startChild(cmd, filepath.Join(dir, "floor.log"), "floor relay ("+cfg.Client+")")
	if err != nil {
		return nil, errors.Join(errors.New("start floor relay"), err)
	}
	return p, nil
}
