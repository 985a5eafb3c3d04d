// Package e2e tests outboxd end to end: a real MariaDB started by the harness, Kafka via kfake
// (the real protocol, in process), outboxd in process or as the built binary, and messages
// read back with a real Kafka client.
package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

var binPath string // the built outboxd binary

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxd-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "outboxd")
	_, self, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", binPath, "./cmd/outboxd")
	build.Dir = filepath.Join(filepath.Dir(self), "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build outboxd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	closeSharedDolt()
	sharedMu.Lock()
	if shared != nil {
		shared.Close()
	}
	sharedMu.Unlock()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	sharedMu sync.Mutex
	shared   *mariadb.Server
	schemaN  atomic.Int64
)

// sharedServer is one MariaDB (FULL row metadata) for the tests that do not restart it; each
// test works in its own schema so their binlog streams do not interfere.
func sharedServer(t *testing.T) *mariadb.Server {
	t.Helper()
	mariadb.RequireT(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := mariadb.Start(ctx, mariadb.Options{})
		if err != nil {
			t.Fatalf("start MariaDB: %v", err)
		}
		shared = s
	}
	return shared
}

const outboxDDL = `CREATE TABLE %s.outbox_event (
  id         BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id   VARCHAR(64)  NOT NULL,
  biz_key    VARCHAR(64)  NULL,
  topic      VARCHAR(128) NULL,
  event_type VARCHAR(64)  NULL,
  payload    LONGBLOB     NULL,
  headers    JSON         NULL,
  created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`

// world is one test's database schema, with an outbox table, on a MariaDB server.
type world struct {
	t      *testing.T
	srv    *mariadb.Server
	db     *sql.DB
	schema string
}

func newWorld(t *testing.T, srv *mariadb.Server) *world {
	t.Helper()
	ctx := context.Background()
	db, err := srv.DB(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := &world{t: t, srv: srv, db: db, schema: fmt.Sprintf("shop%d", schemaN.Add(1))}
	w.exec("CREATE DATABASE " + w.schema)
	w.exec(fmt.Sprintf(outboxDDL, w.schema))
	w.exec("CREATE TABLE " + w.schema + ".orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(64), note TEXT)")
	return w
}

func (w *world) exec(query string, args ...any) {
	w.t.Helper()
	if _, err := w.db.Exec(query, args...); err != nil {
		w.t.Fatalf("%s: %v", query, err)
	}
}

// position is the server's current executed GTID set.
func (w *world) position() string {
	w.t.Helper()
	var pos string
	if err := w.db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		w.t.Fatal(err)
	}
	return pos
}

// row is one outbox row to insert.
type row struct {
	EventID, Key, Topic string
	EventType, Headers  *string
	Payload             []byte
	NullKey             bool
}

func str(s string) *string { return &s }

// commit inserts rows into table (default outbox_event) and an order row in one transaction
// and returns the transaction's GTID.
func (w *world) commit(rows ...row) string {
	return w.commitTo("outbox_event", rows...)
}

func (w *world) commitTo(table string, rows ...row) string {
	w.t.Helper()
	return w.commitIn(w.schema, table, rows...)
}

// commitIn inserts rows into schema.table (and an order row into schema.orders) in one
// transaction and returns its GTID.
func (w *world) commitIn(schema, table string, rows ...row) string {
	w.t.Helper()
	ctx := context.Background()
	conn, err := w.db.Conn(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := insertRows(tx, schema, table, rows); err != nil {
		w.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		w.t.Fatal(err)
	}
	var g string
	if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&g); err != nil {
		w.t.Fatal(err)
	}
	return g
}

// insertRows inserts an order row into schema.orders and rows into schema.table in tx.
func insertRows(tx *sql.Tx, schema, table string, rows []row) error {
	if _, err := tx.Exec("INSERT INTO "+schema+".orders (customer) VALUES (?)", "c"); err != nil {
		return err
	}
	for _, r := range rows {
		var key any = r.Key
		if r.NullKey {
			key = nil
		}
		if _, err := tx.Exec("INSERT INTO "+schema+"."+table+" (event_id, biz_key, topic, event_type, payload, headers) VALUES (?, ?, ?, ?, ?, ?)",
			r.EventID, key, r.Topic, r.EventType, r.Payload, r.Headers); err != nil {
			return err
		}
	}
	return nil
}

// kafkaCluster starts a kfake cluster with the topics (3 partitions each).
func kafkaCluster(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// cfgOpts fills the config template.
type cfgOpts struct {
	Srv        *mariadb.Server
	Start      string
	Tables     []string          // "schema.table"
	Patterns   []string          // tables[].pattern entries, after Tables
	Sinks      map[string]string // name -> the sink's YAML flow map (kafkaSink, rmqSink)
	Routes     string            // YAML list items
	OnPoison   string
	DeadLetter string
	Dir        string
	Interval   string
	User, Pass string
	ServerID   int
	Extra      string // more top-level YAML
	Source     string // more lines under source:, each indented by two spaces
	Addr       string // the source address, when not Srv.Addr (a proxy in front of it)
	// MissingTopicTimeout is retry.missing_topic_timeout, when not the default.
	MissingTopicTimeout string
	// Checkpoint replaces the checkpoint map's path entry (such as "store: mysql, name: x").
	Checkpoint string
}

var serverIDs atomic.Int64

func (o cfgOpts) yaml() string {
	var b strings.Builder
	user := o.User
	if user == "" {
		user = "root"
	}
	if o.ServerID == 0 {
		o.ServerID = 1000 + int(serverIDs.Add(1))
	}
	addr := o.Srv.Addr
	if o.Addr != "" {
		addr = o.Addr
	}
	fmt.Fprintf(&b, "source:\n  flavor: mariadb\n  addr: %s\n  user: %s\n  password: %q\n  server_id: %d\n", addr, user, o.Pass, o.ServerID)
	if o.Start != "" {
		fmt.Fprintf(&b, "  start: %q\n", o.Start)
	}
	b.WriteString(o.Source)
	b.WriteString("tables:\n")
	for _, t := range o.Tables {
		fmt.Fprintf(&b, "  - table: %s\n", t)
	}
	for _, p := range o.Patterns {
		fmt.Fprintf(&b, "  - pattern: %q\n", p)
	}
	b.WriteString("sinks:\n")
	for name, sinkYAML := range o.Sinks {
		fmt.Fprintf(&b, "  %s: %s\n", name, sinkYAML)
	}
	b.WriteString("routes:\n" + o.Routes)
	if o.OnPoison != "" {
		fmt.Fprintf(&b, "on_poison: %s\n", o.OnPoison)
	}
	if o.DeadLetter != "" {
		fmt.Fprintf(&b, "dead_letter: %s\n", o.DeadLetter)
	}
	interval := o.Interval
	if interval == "" {
		interval = "100ms"
	}
	b.WriteString(o.Extra)
	missingTopic := ""
	if o.MissingTopicTimeout != "" {
		missingTopic = ", missing_topic_timeout: " + o.MissingTopicTimeout
	}
	ck := fmt.Sprintf("path: %q", filepath.Join(o.Dir, "checkpoint.json"))
	if o.Checkpoint != "" {
		ck = o.Checkpoint
	}
	fmt.Fprintf(&b, "retry: {initial: 20ms, max: 200ms%s}\ncheckpoint: {%s, interval: %s}\nlog: {level: debug, format: json}\n",
		missingTopic, ck, interval)
	return b.String()
}

func kafkaSink(c *kfake.Cluster) string {
	return fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s}", c.ListenAddrs()[0])
}

// simpleCfg routes every row of w's outbox table to one cluster under its own topic.
func simpleCfg(t *testing.T, w *world, c *kfake.Cluster, start string) cfgOpts {
	return cfgOpts{
		Srv: w.srv, Start: start, Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": kafkaSink(c)},
		Routes: "  - sink: main\n    topic: \"{topic}\"\n",
		Dir:    t.TempDir(),
	}
}

func writeCfg(t *testing.T, o cfgOpts) string {
	t.Helper()
	path := filepath.Join(o.Dir, "outboxd.yaml")
	if err := os.WriteFile(path, []byte(o.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// relay is outboxd running in process.
type relay struct {
	cancel context.CancelFunc
	done   chan error
	logs   *bytes.Buffer
	lw     *lockedWriter // writes logs
}

// logText is the relay's log so far, safe to read while it runs (logs.String() is not).
func (r *relay) logText() string {
	r.lw.mu.Lock()
	defer r.lw.mu.Unlock()
	return r.logs.String()
}

func startRelay(t *testing.T, o cfgOpts, opts daemon.Options) *relay {
	t.Helper()
	cfg, err := config.Parse([]byte(o.yaml()))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, o.yaml())
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{cancel: cancel, done: make(chan error, 1), logs: &bytes.Buffer{}}
	r.lw = &lockedWriter{w: r.logs}
	opts.Logger = zerolog.New(r.lw).Level(zerolog.DebugLevel)
	go func() { r.done <- daemon.Run(ctx, cfg, opts) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop shuts the relay down gracefully and returns its error.
func (r *relay) stop(t *testing.T) error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("relay did not stop within 60s")
		return nil
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// proc is outboxd running as the built binary.
type proc struct {
	cmd  *exec.Cmd
	out  *lockedWriter
	done chan struct{}
	err  error
}

func startBinary(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProgram(t, binPath, args...)
}

// startProgram runs a built program (outboxd, the example consumer) as a child process that
// the test's cleanup kills.
func startProgram(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	p := &proc{cmd: cmd, out: &lockedWriter{w: &bytes.Buffer{}}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("outboxd did not exit within %s; output:\n%s", d, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) output() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.out.w.String()
}

// runBinary runs outboxd to completion and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := startBinary(t, args...)
	code := p.wait(t, 60*time.Second)
	return code, p.output()
}

// consumer reads topics from the start with a real Kafka client.
type consumer struct {
	t   *testing.T
	cl  *kgo.Client
	got []*kgo.Record
}

func newConsumer(t *testing.T, c *kfake.Cluster, topics ...string) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &consumer{t: t, cl: cl}
}

// waitFor polls until n records in all arrived, failing after timeout.
func (c *consumer) waitFor(n int, timeout time.Duration) []*kgo.Record {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for len(c.got) < n {
		if time.Now().After(deadline) {
			c.t.Fatalf("got %d records, want %d within %s", len(c.got), n, timeout)
		}
		c.poll(200 * time.Millisecond)
	}
	return c.got
}

// waitForEvent polls until a record with the event id arrives.
func (c *consumer) waitForEvent(id string, timeout time.Duration) []*kgo.Record {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, r := range c.got {
			if header(r, "event_id") == id {
				return c.got
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("event %s did not arrive within %s (got %d records)", id, timeout, len(c.got))
		}
		c.poll(200 * time.Millisecond)
	}
}

// settle polls for d more and returns everything received.
func (c *consumer) settle(d time.Duration) []*kgo.Record {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		c.poll(100 * time.Millisecond)
	}
	return c.got
}

func (c *consumer) poll(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	f := c.cl.PollFetches(ctx)
	f.EachRecord(func(r *kgo.Record) { c.got = append(c.got, r) })
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// tableIDsT is mariadb.EventIDs failing t on an error.
func tableIDsT(t testing.TB, db *sql.DB, table string) map[string]bool {
	t.Helper()
	ids, err := mariadb.EventIDs(context.Background(), db, table)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// eventIDs lists the records' event ids in arrival order.
func eventIDs(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = header(r, "event_id")
	}
	return out
}

// gtidSeq returns the sequence number of a MariaDB GTID "d-s-n".
func gtidSeq(t *testing.T, g string) int64 {
	t.Helper()
	i := strings.LastIndexByte(g, '-')
	n, err := strconv.ParseInt(g[i+1:], 10, 64)
	if err != nil {
		t.Fatalf("bad GTID %q", g)
	}
	return n
}

// checkPerKeyOrder fails unless, for each key, the first deliveries of its events come in
// the order of seq (the commit order) and every committed event arrived.
func checkPerKeyOrder(t *testing.T, rs []*kgo.Record, committed []string) {
	t.Helper()
	seen := map[string]bool{}
	lastByKey := map[string]int{}
	pos := map[string]int{}
	for i, id := range committed {
		pos[id] = i
	}
	for _, r := range rs {
		id := header(r, "event_id")
		if seen[id] {
			continue
		}
		seen[id] = true
		p, ok := pos[id]
		if !ok {
			t.Fatalf("unexpected event %s", id)
		}
		k := r.Topic + "/" + string(r.Key) // Kafka orders a key within its topic only
		if last, ok := lastByKey[k]; ok && last > p {
			t.Fatalf("key %s: event %s (commit #%d) first arrived after commit #%d", k, id, p, last)
		}
		lastByKey[k] = p
	}
	for _, id := range committed {
		if !seen[id] {
			t.Fatalf("committed event %s never arrived", id)
		}
	}
}

// readCheckpoint returns the saved GTID set, or "" when none was saved.
func readCheckpoint(t *testing.T, dir string) string {
	t.Helper()
	cp, err := checkpoint.Read(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil {
		return ""
	}
	return cp.GTIDSet
}

// waitCheckpoint waits until the saved checkpoint equals want.
func waitCheckpoint(t *testing.T, dir, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := readCheckpoint(t, dir)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint is %q, want %q within %s", got, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
