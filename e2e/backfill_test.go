package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/daemon"
)

// writer inserts one PENDING row per transaction until stopped, recording each row's event id
// and GTID in commit order (one goroutine, so commit order is insertion order).
type writer struct {
	w      *world
	keys   int
	mu     sync.Mutex
	ids    []string
	gtids  map[string]string
	err    error
	stop   chan struct{}
	done   chan struct{}
	prefix string
	// insert is the INSERT statement, with the event id, key and payload as its arguments.
	insert string
}

func startWriter(w *world, prefix string, keys int) *writer {
	return startWriterSQL(w, prefix, keys, "INSERT INTO "+w.schema+".outbox_event (event_id, biz_key, topic, payload) VALUES (?, ?, 'orders', ?)")
}

func startWriterSQL(w *world, prefix string, keys int, insert string) *writer {
	wr := &writer{w: w, keys: keys, gtids: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{}), prefix: prefix, insert: insert}
	go wr.loop()
	return wr
}

func (wr *writer) loop() {
	defer close(wr.done)
	ctx := context.Background()
	conn, err := wr.w.db.Conn(ctx)
	if err != nil {
		wr.err = err
		return
	}
	defer conn.Close()
	for i := 0; ; i++ {
		select {
		case <-wr.stop:
			return
		default:
		}
		id := fmt.Sprintf("%s%d", wr.prefix, i)
		if _, err := conn.ExecContext(ctx, wr.insert, id, fmt.Sprintf("k%d", i%wr.keys), id); err != nil {
			wr.err = err
			return
		}
		var g string
		if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&g); err != nil {
			wr.err = err
			return
		}
		wr.mu.Lock()
		wr.ids = append(wr.ids, id)
		wr.gtids[id] = g
		wr.mu.Unlock()
	}
}

func (wr *writer) count() int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return len(wr.ids)
}

// halt stops the writer and returns its rows in commit order.
func (wr *writer) halt(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	close(wr.stop)
	<-wr.done
	if wr.err != nil {
		t.Fatalf("writer: %v", wr.err)
	}
	return wr.ids, wr.gtids
}

// insertPending inserts n rows with status st as multi-row INSERTs of 500 (ids ascending, so
// primary-key order is commit order), keys k0..k(keys-1); it returns their event ids in order.
func insertPending(t *testing.T, w *world, prefix string, n, keys, st int) []string {
	t.Helper()
	var ids []string
	for off := 0; off < n; off += 500 {
		var vals []string
		var args []any
		for i := off; i < min(n, off+500); i++ {
			id := fmt.Sprintf("%s%d", prefix, i)
			ids = append(ids, id)
			vals = append(vals, "(?, ?, 'orders', ?, ?)")
			args = append(args, id, fmt.Sprintf("k%d", i%keys), id, st)
		}
		w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, biz_key, topic, payload, status) VALUES "+strings.Join(vals, ", "), args...)
	}
	return ids
}

// Backfill, then run: 9,000 PENDING rows from before outboxd, more committed by a writer while
// the backfill's snapshot is taken and the rows are sent, and after it. Every PENDING row
// arrives exactly once (no fault, so no resend): the rows of transactions in the snapshot's
// GTID position from the backfill (empty outbox_gtid header), every later one from the binlog
// with its GTID (no gap, no overlap), per key in commit order across the boundary; the
// poller's SENT rows (status 2) never.
func TestBackfillThenRun(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec("ALTER TABLE " + w.schema + ".outbox_event ADD COLUMN status TINYINT NOT NULL DEFAULT 0")
	c := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, c, "")
	cfgPath := writeCfg(t, o)
	const keys = 20
	pre := insertPending(t, w, "pre-", 9000, keys, 0)
	insertPending(t, w, "sent-", 200, keys, 2)

	wr := startWriter(w, "live-", keys)
	for wr.count() < 50 { // the writer is committing when the snapshot is taken
		time.Sleep(5 * time.Millisecond)
	}
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--where", "status = 0", "--batch", "700")
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	snapSet := readCheckpoint(t, o.Dir)
	if snapSet == "" {
		t.Fatalf("backfill saved no checkpoint:\n%s", out)
	}
	during := wr.count()
	// Rows after the backfill, then the relay: it starts from the snapshot's position.
	for wr.count() < during+500 {
		time.Sleep(5 * time.Millisecond)
	}
	startRelay(t, o, daemon.Options{})
	time.Sleep(300 * time.Millisecond)
	live, liveGTID := wr.halt(t)
	snapSeq := gtidSeq(t, snapSet)

	committed := append(append([]string{}, pre...), live...)
	cons := newConsumer(t, c, "orders")
	rs := cons.waitFor(len(committed), 90*time.Second)
	rs = cons.settle(time.Second)
	if len(rs) != len(committed) {
		t.Fatalf("got %d records, want %d (each row once)", len(rs), len(committed))
	}
	checkPerKeyOrder(t, rs, committed)

	byID := map[string]*kgo.Record{}
	for _, r := range rs {
		byID[header(r, "event_id")] = r
	}
	for _, id := range pre {
		if g := header(byID[id], "outbox_gtid"); g != "" {
			t.Fatalf("row %s from before the backfill came with GTID %s: sent by run, not by the backfill", id, g)
		}
	}
	inSnap, after := 0, 0
	for _, id := range live {
		g := header(byID[id], "outbox_gtid")
		switch {
		case gtidSeq(t, liveGTID[id]) <= snapSeq:
			inSnap++
			if g != "" {
				t.Fatalf("row %s (GTID %s, in the snapshot %s) was sent by run too: overlap", id, liveGTID[id], snapSet)
			}
		default:
			after++
			if g != liveGTID[id] {
				t.Fatalf("row %s (GTID %s, after the snapshot %s) came with outbox_gtid %q: want it from the binlog", id, liveGTID[id], snapSet, g)
			}
		}
	}
	if inSnap == 0 || after < 500 {
		t.Fatalf("writer rows: %d in the snapshot, %d after: the snapshot did not fall inside the writes", inSnap, after)
	}
	// Rows after the snapshot arrive through the binlog in commit order, per key (checked above
	// over all rows); the relay's checkpoint moves past the snapshot.
	if !strings.Contains(out, "rows sent") || !strings.Contains(out, "binlog_snapshot") {
		t.Fatalf("backfill output lacks its summary:\n%s", out)
	}
	t.Logf("backfill: %d pre rows, %d writer rows in the snapshot, %d after; snapshot %s", len(pre), inSnap, after, snapSet)
}

// Backfill against Dolt, a MySQL-flavor server: as far as Dolt serves MySQL's statements; check
// names the privileges it needs there. It has
// no performance_schema.log_status (nor binlog_order_commits), so the lock-free method fails and
// the backfill falls back to FLUSH TABLES WITH READ LOCK, START TRANSACTION WITH CONSISTENT
// SNAPSHOT and @@GLOBAL.gtid_executed, which Dolt does serve; --no-lock forbids the fallback and
// names the privilege the lock-free method needs. Then run continues from the snapshot: the rows
// committed after it arrive once, from the binlog, and the backfilled ones are not sent again.
func TestDoltBackfill(t *testing.T) {
	w := newDoltWorld(t)
	w.exec("GRANT RELOAD ON *.* TO '" + w.user + "'@'%'")
	kc := kafkaCluster(t, "orders")
	admin := admFreeAddr(t)
	dir := t.TempDir()
	cfg := w.writeCfg(t, doltRelay{Start: "latest", Admin: admin, Kafka: kc, Dir: dir})
	var committed []string
	for i := range 30 {
		id := fmt.Sprintf("pre%d", i)
		w.commit("outbox_event", row{EventID: id, Key: fmt.Sprintf("k%d", i%4), Topic: "orders", Payload: []byte(id)})
		committed = append(committed, id)
	}
	table := w.schema + ".outbox_event"

	// check names the privileges the backfill needs on MySQL (an OK line: run needs neither).
	code, out := runBinary(t, "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "backfill: outboxd backfill (only) needs BACKUP_ADMIN") || !strings.Contains(out, "RELOAD") {
		t.Fatalf("check exited %d, want 0 with the backfill's privileges:\n%s", code, out)
	}
	code, out = runBinary(t, "backfill", "--config", cfg, "--table", table, "--no-lock", "--dry-run")
	if code != 1 || !strings.Contains(out, "BACKUP_ADMIN") || !strings.Contains(out, "log_status") {
		t.Fatalf("backfill --no-lock against Dolt exited %d, want 1 naming BACKUP_ADMIN and log_status:\n%s", code, out)
	}
	code, out = runBinary(t, "backfill", "--config", cfg, "--table", table, "--dry-run")
	if code != 0 || !strings.Contains(out, table+": 30 rows match") || !strings.Contains(out, "flush_tables_with_read_lock") {
		t.Fatalf("backfill --dry-run exited %d, want 30 rows at a snapshot taken under the read lock:\n%s", code, out)
	}
	if got := readCheckpoint(t, dir); got != "" {
		t.Fatalf("--dry-run saved checkpoint %s", got)
	}
	want := w.position()
	code, out = runBinary(t, "backfill", "--config", cfg, "--table", table, "--batch", "7")
	if code != 0 || !strings.Contains(out, table+": 30 rows sent") {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	if got := readCheckpoint(t, dir); got != want {
		t.Fatalf("checkpoint after backfill %q, want the snapshot's %q", got, want)
	}
	code, out = runBinary(t, "backfill", "--config", cfg, "--table", table)
	if code != 1 || !strings.Contains(out, "already holds") {
		t.Fatalf("a second backfill over the checkpoint exited %d, want 1 (refused without --overwrite):\n%s", code, out)
	}

	p := runDolt(t, cfg, admin)
	for i := range 10 {
		id := fmt.Sprintf("post%d", i)
		w.commit("outbox_event", row{EventID: id, Key: fmt.Sprintf("k%d", i%4), Topic: "orders", Payload: []byte(id)})
		committed = append(committed, id)
	}
	cons := newConsumer(t, kc, "orders")
	cons.waitFor(len(committed), 60*time.Second)
	rs := cons.settle(2 * time.Second)
	if len(rs) != len(committed) {
		t.Fatalf("%d records, want %d (each row once)", len(rs), len(committed))
	}
	checkPerKeyOrder(t, rs, committed)
	for _, r := range rs {
		id, g := header(r, "event_id"), header(r, "outbox_gtid")
		if strings.HasPrefix(id, "pre") != (g == "") {
			t.Fatalf("record %s came with outbox_gtid %q: backfilled rows have none, binlog rows theirs", id, g)
		}
	}
	stopDolt(t, p)
}

// What a backfill that cannot finish leaves: no checkpoint, ever. While an outboxd runs on the
// checkpoint it refuses at once. A poison row under on_poison: stop fails it after the pages
// before its page were sent; --dead-letter-event diverts that row (audited) and the backfill finishes.
// A broker that does not answer keeps it retrying; an interrupt then ends it without a checkpoint.
func TestBackfillFailuresSetNoCheckpoint(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "orders", "dlq")
	table := w.schema + ".outbox_event"
	for i := range 20 {
		r := row{EventID: fmt.Sprintf("e%d", i), Key: "k", Topic: "orders", Payload: []byte("x")}
		if i == 12 {
			r.Topic = "" // poison: an empty topic
		}
		w.commit(r)
	}

	// An outboxd on the same checkpoint file: refused (the file's lock).
	o := simpleCfg(t, w, c, "latest")
	cfgPath := writeCfg(t, o)
	rel := startRelay(t, o, daemon.Options{})
	waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)
	before := readCheckpoint(t, o.Dir)
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", table)
	if code != 1 || !strings.Contains(out, "locked by another process") {
		t.Fatalf("backfill beside a running outboxd exited %d, want 1 (the checkpoint's lock):\n%s", code, out)
	}
	if err := rel.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := readCheckpoint(t, o.Dir); got != before {
		t.Fatalf("checkpoint moved from %s to %s", before, got)
	}

	// A fresh checkpoint: the poison row stops the backfill, nothing is saved.
	o = simpleCfg(t, w, c, "")
	o.Extra = "dead_letter: {sink: main, topic: dlq}\n"
	cfgPath = writeCfg(t, o)
	code, out = runBinary(t, "backfill", "--config", cfgPath, "--table", table, "--batch", "5")
	if code != 1 || !strings.Contains(out, "poison row") || !strings.Contains(out, "e12") {
		t.Fatalf("backfill over a poison row exited %d, want 1 naming e12:\n%s", code, out)
	}
	if got := readCheckpoint(t, o.Dir); got != "" {
		t.Fatalf("a failed backfill saved checkpoint %s", got)
	}
	cons := newConsumer(t, c, "orders", "dlq")
	// The pages before the poison row's were sent and acknowledged (a page is one transaction
	// to the pipeline: none of the poison row's page is sent).
	cons.waitForEvent("e9", 20*time.Second)

	code, out = runBinary(t, "backfill", "--config", cfgPath, "--table", table, "--dead-letter-event", "e12")
	if code != 0 || readCheckpoint(t, o.Dir) != w.position() {
		t.Fatalf("backfill with --dead-letter-event e12 exited %d, checkpoint %q (want %s):\n%s", code, readCheckpoint(t, o.Dir), w.position(), out)
	}
	cons.waitForEvent("e19", 20*time.Second)
	// The dead letter is on its own topic, which the consumer may fetch after orders: wait for
	// it too, then a little more for a second copy.
	cons.waitForEvent("e12", 20*time.Second)
	rs := cons.settle(time.Second)
	dead := 0
	for _, r := range rs {
		if r.Topic == "dlq" && header(r, "event_id") == "e12" {
			dead++
		}
	}
	if dead != 1 {
		t.Fatalf("e12 dead-lettered %d times, want 1", dead)
	}
	if b, err := os.ReadFile(filepath.Join(o.Dir, "audit.log")); err != nil || !strings.Contains(string(b), "e12") {
		t.Fatalf("audit.log: %q, %v", b, err)
	}

	// A broker that never answers: the backfill retries until interrupted, then saves nothing.
	dead2 := kafkaCluster(t, "orders")
	addr := dead2.ListenAddrs()[0]
	dead2.Close()
	o = simpleCfg(t, w, c, "")
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 500ms}", addr)}
	o.Extra = "dead_letter: {sink: main, topic: dlq}\n"
	cfgPath = writeCfg(t, o)
	p := startBinary(t, "backfill", "--config", cfgPath, "--table", table, "--dead-letter-event", "e12")
	time.Sleep(3 * time.Second)
	select {
	case <-p.done:
		t.Fatalf("backfill ended while the broker is away:\n%s", p.output())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code == 0 {
		t.Fatalf("interrupted backfill exited 0:\n%s", p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != "" {
		t.Fatalf("an interrupted backfill saved checkpoint %s:\n%s", got, p.output())
	}
}

// With checkpoint.store: mysql the backfill writes the row, and refuses while an outboxd holds
// the leader lock (unless --ignore-leader); run then starts from the row.
func TestBackfillMySQLStore(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, c, "")
	table := useMySQLStore(w, &o, "bf")
	cfgPath := writeCfg(t, o)
	committed := backfillRefusedWhileLeading(t, w, o, cfgPath, "bf", 30)
	want := w.position()
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if set, _ := storeRow(t, w.db, table, "bf"); code != 0 || set != want {
		t.Fatalf("backfill exited %d, row %q, want %q:\n%s", code, set, want, out)
	}
	// Over an existing row: refused, unless --overwrite (here for the one row committed since,
	// which the condition selects).
	w.commit(row{EventID: "e30", Key: "k0", Topic: "orders", Payload: []byte("e30")})
	committed = append(committed, "e30")
	code, out = runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--where", "event_id = 'e30'")
	if code != 1 || !strings.Contains(out, "already holds "+want) {
		t.Fatalf("backfill over the row exited %d, want 1:\n%s", code, out)
	}
	want = w.position()
	code, out = runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--where", "event_id = 'e30'", "--overwrite")
	if set, _ := storeRow(t, w.db, table, "bf"); code != 0 || set != want || !strings.Contains(out, ": 1 rows sent") {
		t.Fatalf("backfill --overwrite exited %d, row %q, want %q:\n%s", code, set, want, out)
	}
	startRelay(t, o, daemon.Options{})
	for i := 31; i < 40; i++ {
		id := fmt.Sprintf("e%d", i)
		w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%3), Topic: "orders", Payload: []byte(id)})
		committed = append(committed, id)
	}
	cons := newConsumer(t, c, "orders")
	cons.waitFor(len(committed), 30*time.Second)
	rs := cons.settle(time.Second)
	if len(rs) != len(committed) {
		t.Fatalf("%d records, want %d (each once)", len(rs), len(committed))
	}
	checkPerKeyOrder(t, rs, committed)
}

// backfillRefusedWhileLeading commits n rows on keys k0..k2 to topic orders, then holds the
// leader lock of o (checkpoint.name name) and checks that backfill refuses, naming the lock;
// the lock is released on return. It returns the committed event ids.
func backfillRefusedWhileLeading(t *testing.T, w *world, o cfgOpts, cfgPath, name string, n int) []string {
	t.Helper()
	var committed []string
	for i := range n {
		id := fmt.Sprintf("e%d", i)
		w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%3), Topic: "orders", Payload: []byte(id)})
		committed = append(committed, id)
	}
	lock, err := w.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	var got int
	if err := lock.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 0)", lockNameOf(o, name)).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %d, %v", got, err)
	}
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if code != 1 || !strings.Contains(out, "leader lock") {
		t.Fatalf("backfill while the leader lock is held exited %d, want 1 naming the lock:\n%s", code, out)
	}
	if _, err := lock.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", lockNameOf(o, name)); err != nil {
		t.Fatal(err)
	}
	return committed
}
