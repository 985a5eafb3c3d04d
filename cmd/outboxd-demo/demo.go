package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/examples/benefits"
	"github.com/outboxd/outboxd/internal/shop"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

type demoOptions struct {
	Outboxd   string
	Duration  time.Duration
	Every     time.Duration
	KafkaPort int
	Out       io.Writer
}

// demoResult is what a run saw, for the demo's own test.
type demoResult struct {
	Ordered, Received int
	// Paid is how many paid orders the shop committed, Granted how many benefits the example
	// consumer's database holds at the end.
	Paid, Granted int
}

// Paid orders go to Kafka, where the example consumer grants their benefits; new orders to
// RocketMQ, as many shops split them.
var topics = []string{"order.paid"}

const rmqTopic = "ORDER_CREATED"

// grantsSQL creates outboxd's least-privilege user (MariaDB 10.5+ names REPLICATION CLIENT
// "BINLOG MONITOR").
const grantsSQL = `
CREATE USER 'outboxd'@'127.0.0.1' IDENTIFIED BY 'demo-secret';
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'outboxd'@'127.0.0.1';
GRANT SELECT ON shop.outbox_event TO 'outboxd'@'127.0.0.1';
`

const configTemplate = `# written by outboxd-demo
source:
  flavor: mariadb
  addr: %s
  user: outboxd
  password: ${OUTBOXD_MYSQL_PASSWORD}
  server_id: 4242
  start: latest
tables:
  - table: shop.outbox_event
sinks:
  kafka: {type: kafka, brokers: ["%s"]}
  rmq: {type: rocketmq, nameservers: ["%s"], group: outboxd-demo}
routes:
  - match: {table: "shop.*", topic: "order.paid"}
    sink: kafka
    topic: "{topic}"
  - match: {table: "shop.*", topic: "order.created"}
    sink: rmq
    topic: ORDER_CREATED
    tag: "{event_type}"
checkpoint: {path: %s, interval: 1s}
admin: {listen: "%s"}
log: {level: info, format: console}
`

func runDemo(ctx context.Context, o demoOptions) (demoResult, error) {
	var res demoResult
	out := &syncWriter{w: o.Out}
	say := func(format string, args ...any) { fmt.Fprintf(out, "demo    | "+format+"\n", args...) }

	dir, err := os.MkdirTemp("", "outboxd-demo-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	say("starting a throwaway MariaDB (ROW binlog, FULL row image and metadata, GTID strict)")
	db, err := mariadb.Start(ctx, mariadb.Options{Dir: dir})
	if err != nil {
		return res, fmt.Errorf("start MariaDB: %w", err)
	}
	defer db.Close()
	root, err := db.DB(ctx, "")
	if err != nil {
		return res, err
	}
	defer root.Close()
	if err := createShop(ctx, root); err != nil {
		return res, fmt.Errorf("create the shop schema: %w", err)
	}
	say("MariaDB on %s; shop.orders and shop.outbox_event created; user outboxd has REPLICATION SLAVE, BINLOG MONITOR, SELECT", db.Addr)

	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, topics...)}
	if o.KafkaPort != 0 {
		opts = append(opts, kfake.Ports(o.KafkaPort))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return res, fmt.Errorf("start kfake: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	say("Kafka (kfake, in process) on %s with topics %v, 3 partitions each", brokers[0], topics)

	mq, err := rocketmq.Start(rocketmq.Options{Topics: []string{rmqTopic}, Queues: 4})
	if err != nil {
		return res, fmt.Errorf("start the RocketMQ test broker: %w", err)
	}
	defer mq.Close()
	say("RocketMQ (protocol-level test NameServer and Broker, in process) at %s with topic %s, 4 queues", mq.NameServer(), rmqTopic)

	adminAddr, err := freeLoopbackAddr()
	if err != nil {
		return res, err
	}
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	cfgText := fmt.Sprintf(configTemplate, db.Addr, brokers[0], mq.NameServer(), filepath.Join(dir, "checkpoint.json"), adminAddr)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return res, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relay, err := startOutboxd(ctx, o.Outboxd, cfgPath, out)
	if err != nil {
		return res, err
	}
	defer relay.stop()

	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return res, err
	}
	defer client.Close()

	shopDB, err := db.DB(ctx, "shop")
	if err != nil {
		return res, err
	}
	defer shopDB.Close()

	// The example consumer: a benefit per paid order, effectively once (examples/benefits).
	benefitsDB, err := db.DB(ctx, "benefits")
	if err != nil {
		return res, err
	}
	defer benefitsDB.Close()
	if _, err := benefits.Setup(ctx, benefitsDB); err != nil {
		return res, fmt.Errorf("create the benefits tables: %w", err)
	}
	consumerCtx, stopConsumer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumer()
	consumerDone := make(chan error, 1)
	go func() {
		consumerDone <- benefits.Run(consumerCtx, benefits.Config{Brokers: brokers, Topic: "order.paid", Group: "benefits", DB: benefitsDB,
			Log: func(format string, args ...any) { fmt.Fprintf(out, "benefit | "+format+"\n", args...) }})
	}()

	// The first order waits for the stream, so `start: latest` includes it.
	if err := waitForStreaming(ctx, relay); err != nil {
		return res, err
	}
	say("outboxd is streaming; the shop app places an order every %s (Ctrl-C to stop)", o.Every)
	say("outboxd's config: %s; its admin server: http://%s (/status /metrics /readyz)", cfgPath, adminAddr)
	say("  while the demo runs, try in another terminal: %s status --config %s", o.Outboxd, cfgPath)
	say("  or: %s status --addr %s", o.Outboxd, adminAddr)
	say("latency: commit→consumer (Kafka) runs from the app's COMMIT returning to this consumer reading")
	say("  the event, commit→broker (RocketMQ) to the broker storing it. ? means no commit time was known:")
	say("  the event arrived before the app's COMMIT call returned, or the app did not write it (a row")
	say("  you inserted yourself).")
	sqlClient, insert := ownRow(db.Addr)
	say("insert a row of your own: in another terminal, open the shop database as root (no password)")
	say("  %s", sqlClient)
	say("  and paste:")
	say("  %s", insert)
	say("  it arrives below as a line \"rocketmq| ORDER_CREATED ... key=me\" (topic order.paid goes to Kafka),")
	say("  with commit→broker ? since the demo did not commit it")
	say("benefit: the example consumer grants one benefit per paid order with the consumer kit, in one")
	say("  transaction with its dedup mark, and commits the Kafka offset only after it (database benefits)")

	var wg sync.WaitGroup
	var mu sync.Mutex
	var committedAt sync.Map // event_id -> time COMMIT returned, for the end-to-end latency
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := shop.Run(ctx, shopDB, shop.RunOptions{
			Plan:  shop.Plan{Created: shop.Kind{Topic: "order.created", EventType: "OrderCreated"}, Paid: shop.Kind{Topic: "order.paid", EventType: "OrderPaid"}, PaidEvery: 3},
			Every: o.Every,
			Committed: func(ord shop.Order, _ int64, at time.Time) {
				committedAt.Store(ord.EventID, at)
				if ord.Kind.Topic == "order.paid" {
					mu.Lock()
					res.Paid++
					mu.Unlock()
				}
			},
			Failed: func(_ shop.Order, err error) {
				if ctx.Err() == nil {
					fmt.Fprintf(out, "app     | order failed: %v\n", err)
				}
			},
		})
		mu.Lock()
		res.Ordered = n
		mu.Unlock()
	}()
	show := func(r *kgo.Record) {
		res.Received++
		var evID string
		for _, h := range r.Headers {
			if h.Key == "event_id" {
				evID = string(h.Value)
			}
		}
		latency := "?"
		if t, ok := committedAt.Load(evID); ok {
			latency = time.Since(t.(time.Time)).Round(100 * time.Microsecond).String()
		}
		fmt.Fprintf(out, "kafka   | %-13s p%d key=%-6s event_id=%.8s…  commit→consumer %s\n          %s\n",
			r.Topic, r.Partition, r.Key, evID, latency, r.Value)
	}
	showMQ := func(m rocketmq.Message) {
		res.Received++
		latency := "?"
		if t, ok := committedAt.Load(m.Keys); ok { // the broker's store time, not when we looked
			latency = m.StoredAt.Sub(t.(time.Time)).Round(100 * time.Microsecond).String()
		}
		fmt.Fprintf(out, "rocketmq| %-13s q%d key=%-6s event_id=%.8s…  tag=%s commit→broker %s\n          %s\n",
			m.Topic, m.Queue, m.Properties["SHARDING_KEY"], m.Keys, m.Tags, latency, m.Body)
	}
	mqShown := 0
	pollMQ := func() {
		ms := mq.Messages(rmqTopic)
		// Messages come ordered by queue and offset; show the new ones by store time.
		sort.Slice(ms, func(i, j int) bool { return ms[i].StoredAt.Before(ms[j].StoredAt) })
		for ; mqShown < len(ms); mqShown++ {
			showMQ(ms[mqShown])
		}
	}
	for ctx.Err() == nil {
		poll, cancelPoll := context.WithTimeout(ctx, 100*time.Millisecond)
		client.PollFetches(poll).EachRecord(show)
		cancelPoll()
		pollMQ()
		if relay.exited() {
			cancel()
			wg.Wait()
			return res, fmt.Errorf("%w: exited early: %w", errOutboxd, relay.wait())
		}
	}
	wg.Wait()
	// Orders committed just before the stop are still on their way: wait for them briefly.
	drain, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelDrain()
	for res.Received < res.Ordered && drain.Err() == nil {
		poll, cancelPoll := context.WithTimeout(drain, 100*time.Millisecond)
		client.PollFetches(poll).EachRecord(show)
		cancelPoll()
		pollMQ()
	}
	// The consumer grants what reached Kafka; give it a moment for the last ones.
	for drain.Err() == nil && countBenefits(drain, benefitsDB) < res.Paid {
		time.Sleep(100 * time.Millisecond)
	}
	stopConsumer()
	if err := <-consumerDone; err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("the benefits consumer: %w", err)
	}
	res.Granted = countBenefits(context.WithoutCancel(ctx), benefitsDB)
	say("stopping: %d events committed, %d received; %d paid orders, %d benefits granted", res.Ordered, res.Received, res.Paid, res.Granted)
	if err := relay.stop(); err != nil {
		return res, fmt.Errorf("%w: did not stop cleanly: %w", errOutboxd, err)
	}
	return res, nil
}

func countBenefits(ctx context.Context, db *sql.DB) int {
	var n int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM benefit").Scan(&n) // 0 on error: the demo only reports it
	return n
}

// errOutboxd marks a failure of the outboxd process itself (it exited early, or not cleanly on
// SIGTERM), which a stop signal to the demo does not excuse.
var errOutboxd = errors.New("outboxd")

// freeLoopbackAddr returns 127.0.0.1 with a port that was free a moment ago, for admin.listen:
// the default 127.0.0.1:9120 may be taken by an outboxd already running on this machine.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// createShop creates the shop's tables and outboxd's user.
// ownRow returns the command line that opens the demo's shop database as root over TCP at
// addr, and an INSERT into shop.outbox_event the user can paste there: the row goes to
// RocketMQ's ORDER_CREATED by the demo's routes, so the example consumer of order.paid does
// not see a payload it does not know.
func ownRow(addr string) (client, insert string) {
	host, port, _ := net.SplitHostPort(addr)
	client = fmt.Sprintf("mariadb -h %s -P %s -u root shop", host, port)
	insert = `INSERT INTO outbox_event (event_id, biz_key, topic, event_type, payload) ` +
		`VALUES (UUID(), 'me', 'order.created', 'OrderCreated', '{"order_id": 424242, "note": "my own row"}');`
	return client, insert
}

func createShop(ctx context.Context, root *sql.DB) error {
	conn, err := root.Conn(ctx) // one connection, so USE applies to the statements after it
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, stmt := range append([]string{"CREATE DATABASE shop", "USE shop"}, shop.SchemaStatements()...) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return execScript(ctx, root, grantsSQL)
}

func execScript(ctx context.Context, db *sql.DB, script string) error {
	for _, stmt := range splitStatements(script) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

func splitStatements(s string) []string {
	var out []string
	for _, stmt := range strings.Split(s, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// relayProc is the outboxd child process.
type relayProc struct {
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	streaming chan struct{}
	once      sync.Once
}

func startOutboxd(ctx context.Context, bin, cfgPath string, out io.Writer) (*relayProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("outboxd binary %s: %w (run `make build` first)", bin, err)
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "OUTBOXD_MYSQL_PASSWORD=demo-secret")
	// A process group of its own: Ctrl-C in the terminal reaches only the demo, which then
	// stops outboxd with one SIGTERM. In the terminal's group outboxd would get the SIGINT too,
	// take the demo's SIGTERM as a second signal and exit at once without draining.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, done: make(chan struct{}), streaming: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(out, "outboxd | %s\n", line)
			if strings.Contains(line, "binlog stream started") {
				p.once.Do(func() { close(p.streaming) })
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func waitForStreaming(ctx context.Context, p *relayProc) error {
	select {
	case <-p.streaming:
		return nil
	case <-p.done:
		return fmt.Errorf("outboxd exited before streaming: %w", p.err)
	case <-time.After(30 * time.Second):
		return errors.New("outboxd did not start streaming within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *relayProc) wait() error { <-p.done; return p.err }

// stop sends SIGTERM and waits for the graceful drain; it is idempotent.
func (p *relayProc) stop() error {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("killed after 40s without exiting")
	}
	return p.err
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
