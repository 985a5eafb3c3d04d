package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/server"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/replication"
)

// failoverWorld is a replicated pair (GTID replication, log_slave_updates), an outbox table
// created on the primary, one kfake cluster and outboxd's config with source.addrs.
type failoverWorld struct {
	t    *testing.T
	pair *replication.Pair
	w    *world // on the current primary; switched by onPrimary
	o    cfgOpts
	kc   *consumer
	ids  []string
	// admin is outboxd's admin.listen.
	admin string
}

func newFailoverWorld(t *testing.T, addrs func(p *replication.Pair) []string, extraSource string, edit ...func(w *world, o *cfgOpts)) (*failoverWorld, string) {
	t.Helper()
	pair := replication.StartPair(t, replication.Options{})
	w := newWorld(t, pair.Primary())
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Source = extraSource
	for _, e := range edit {
		e(w, &o)
	}
	admin := admFreeAddr(t)
	o.Extra += fmt.Sprintf("admin: {listen: %q}\n", admin)
	y := o.yaml()
	list := make([]string, 0, 2)
	for _, a := range addrs(pair) {
		list = append(list, fmt.Sprintf("%q", a))
	}
	y = strings.Replace(y, "  addr: "+pair.Primary().Addr+"\n", "  addrs: ["+strings.Join(list, ", ")+"]\n", 1)
	path := filepath.Join(o.Dir, "outboxd.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return &failoverWorld{t: t, pair: pair, w: w, o: o, kc: newConsumer(t, kc, "t"), admin: admin}, path
}

// commit commits rows ev<from>..ev<to-1>, one transaction each, on the current primary.
func (f *failoverWorld) commit(from, to int) string {
	var g string
	for i := from; i < to; i++ {
		id := fmt.Sprintf("ev%03d", i)
		g = f.w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%4), Topic: "t", Payload: []byte(id)})
		f.ids = append(f.ids, id)
	}
	return g
}

// onPrimary points the world's writes at the pair's current primary.
func (f *failoverWorld) onPrimary() {
	f.t.Helper()
	f.w = &world{t: f.t, srv: f.pair.Primary(), db: serverDB(f.t, f.pair.Primary()), schema: f.w.schema}
}

// serverDB is a root pool to s, closed when the test ends.
func serverDB(t *testing.T, s *mariadb.Server) *sql.DB {
	t.Helper()
	db, err := s.DB(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func primaryFirst(p *replication.Pair) []string { return []string{p.Primary().Addr, p.Replica().Addr} }

// A planned switchover while outboxd streams: writes stop, the replica is promoted, the old
// primary goes down for maintenance; outboxd, with source.addrs, continues on the new primary.
// Every row arrives once per run, in per-key order.
func TestFailoverSwitchover(t *testing.T) {
	f, path := newFailoverWorld(t, primaryFirst, "")
	p := startBinary(t, "run", "--config", path)
	f.commit(0, 40)
	f.kc.waitFor(40, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := f.pair.Primary()
	if err := f.pair.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(); err != nil { // maintenance: the old primary goes away
		t.Fatal(err)
	}
	f.onPrimary()
	last := f.commit(40, 80)
	f.kc.waitForEvent("ev079", 60*time.Second)
	checkPerKeyOrder(t, f.kc.settle(500*time.Millisecond), f.ids)
	waitCheckpoint(t, f.o.Dir, f.w.position(), 20*time.Second)
	if !strings.Contains(p.output(), "streaming from another source candidate") || !strings.Contains(p.output(), f.pair.Primary().Addr) {
		t.Fatalf("no switch to %s logged:\n%s", f.pair.Primary().Addr, p.output())
	}
	if gtidSeq(t, last) <= 40 {
		t.Fatalf("last GTID %s: the new primary's writes were expected past the old history", last)
	}
}

// outboxd reads the replica (with log_slave_updates). The primary crashes and the replica is
// promoted: everything outboxd delivered exists on the new primary (it only ever relayed what
// reached the replica), so it just goes on: no phantom events, no missing transactions.
func TestFailoverReadingTheReplica(t *testing.T) {
	f, path := newFailoverWorld(t, func(p *replication.Pair) []string { return []string{p.Replica().Addr} }, "")
	p := startBinary(t, "run", "--config", path)
	f.commit(0, 30)
	f.kc.waitFor(30, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.pair.PromoteAfterCrash(ctx); err != nil {
		t.Fatal(err)
	}
	f.onPrimary()
	f.commit(30, 50)
	rs := f.kc.waitForEvent("ev049", 60*time.Second)
	checkPerKeyOrder(t, f.kc.settle(500*time.Millisecond), f.ids)
	have := tableIDsT(t, f.w.db, f.w.schema+".outbox_event")
	for _, r := range rs {
		if id := header(r, "event_id"); !have[id] {
			t.Errorf("delivered %s, which the new primary does not have (a phantom)", id)
		}
	}
	if strings.Contains(p.output(), "no longer has") {
		t.Fatalf("missing transactions reported while reading the replica:\n%s", p.output())
	}
}

// A crash failover that loses transactions: the replica stops replicating, the primary takes
// ten more transactions that outboxd delivers and checkpoints, then dies; the replica is
// promoted without them. on_missing_gtids: stop exits naming them; continue logs and counts
// them and resumes from the last transaction both histories share.
func TestFailoverCrashLosesDeliveredTransactions(t *testing.T) {
	for _, mode := range []string{"stop", "continue"} {
		t.Run(mode, func(t *testing.T) {
			f, path := newFailoverWorld(t, primaryFirst, "  on_missing_gtids: "+mode+"\n")
			p := startBinary(t, "run", "--config", path)
			f.commit(0, 20)
			f.kc.waitFor(20, 30*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := f.pair.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			rdb := serverDB(t, f.pair.Replica())
			if _, err := rdb.Exec("STOP SLAVE"); err != nil {
				t.Fatal(err)
			}
			lost := f.commit(20, 30) // only on the primary
			f.kc.waitForEvent("ev029", 30*time.Second)
			waitCheckpoint(t, f.o.Dir, f.w.position(), 20*time.Second)
			if err := f.pair.PromoteAfterCrash(ctx); err != nil {
				t.Fatal(err)
			}
			f.onPrimary()
			if mode == "stop" {
				code := p.wait(t, 60*time.Second)
				out := p.output()
				if code != 1 || !strings.Contains(out, "no source candidate has every transaction outboxd already delivered") ||
					!strings.Contains(out, ".."+lost) || !strings.Contains(out, "on_missing_gtids: continue") {
					t.Fatalf("exit %d, want 1 naming the lost transactions up to %s and the remedies:\n%s", code, lost, out)
				}
				return
			}
			f.commit(30, 45) // the new primary's own
			f.kc.waitForEvent("ev044", 60*time.Second)
			rs := f.kc.settle(500 * time.Millisecond)
			// ev020..ev029 were delivered once (before the crash) and are gone from the
			// database; ev030.. come from the new primary, in order.
			checkPerKeyOrder(t, rs, f.ids)
			out := p.output()
			if !strings.Contains(out, "on_missing_gtids: continue: these transactions were delivered, and the database no longer has them") {
				t.Fatalf("the lost transactions were not logged:\n%s", out)
			}
			waitCheckpoint(t, f.o.Dir, f.w.position(), 20*time.Second)
			vals, _ := admScrape(t, f.admin)
			if got := vals["outboxd_missing_transactions_total"]; got != 10 {
				t.Errorf("outboxd_missing_transactions_total = %v, want the 10 transactions lost with the old primary", got)
			}
			if st, body := admGet(f.admin, "/status"); st != 200 || !strings.Contains(body, f.pair.Primary().Addr) {
				t.Errorf("/status %d does not name the new primary %s: %s", st, f.pair.Primary().Addr, body)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
		})
	}
}

// With the mysql store a crash failover that loses delivered transactions is reported, and
// outboxd goes on even under on_missing_gtids: stop (the default): the row on the new primary
// replicated with the data and names nothing it lacks, so a restarted process would resume
// from it without a word, and the running one must not stop where its successor would not. It
// logs and counts what it delivered that the database lost, and streams the new primary's rows.
func TestFailoverCrashMySQLStoreGoesOn(t *testing.T) {
	// With ha the leader's lock connection dies with the primary too: it fences, leads again
	// on the new primary and reports what it remembers checkpointing (lostBehind), unless
	// its stream's reconnect saw it first.
	for _, ha := range []bool{false, true} {
		t.Run(fmt.Sprintf("ha=%v", ha), func(t *testing.T) { crashMySQLStoreGoesOn(t, ha) })
	}
}

func crashMySQLStoreGoesOn(t *testing.T, ha bool) {
	var writer *faultproxy.Proxy // the writer's address follows the primary, as a VIP does
	var table string
	f, path := newFailoverWorld(t, primaryFirst, "", func(w *world, o *cfgOpts) {
		var err error
		if writer, err = faultproxy.New(w.srv.Addr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { writer.Close() })
		table = useMySQLStore(w, o, "fo")
		o.Checkpoint += fmt.Sprintf(", writer_addr: %q", writer.Addr())
		if ha {
			o.Extra += "ha: {enabled: true, lease: 2s}\n"
		}
	})
	p := startBinary(t, "run", "--config", path)
	f.commit(0, 20)
	f.kc.waitFor(20, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.pair.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.pair.PauseReplication(ctx); err != nil {
		t.Fatal(err)
	}
	firstLost := f.commit(20, 21) // these only on the primary
	lost := f.commit(21, 30)
	f.kc.waitForEvent("ev029", 30*time.Second)
	waitStoreRow(t, f.w.db, table, "fo", lost, 20*time.Second)
	if err := f.pair.PromoteAfterCrash(ctx); err != nil {
		t.Fatal(err)
	}
	writer.SetTarget(f.pair.Primary().Addr)
	writer.ResetAll()
	f.onPrimary()
	if got, _ := storeRow(t, f.w.db, table, "fo"); strings.Contains(got, lost) {
		t.Fatalf("the new primary's checkpoint row %q names the lost %s: it replicated ahead of the data?", got, lost)
	}
	last := f.commit(30, 45)
	f.kc.waitForEvent("ev044", 60*time.Second)
	checkPerKeyOrder(t, f.kc.settle(500*time.Millisecond), f.ids)
	waitStoreRow(t, f.w.db, table, "fo", last, 20*time.Second)
	out := p.output()
	// The lost range starts at the first lost row; it may end past the last, at a checkpoint
	// save of outboxd's own (a transaction of the old primary too).
	if !p.running() || !strings.Contains(out, "the database no longer has them") || !strings.Contains(out, "domain 0: "+firstLost+"..") {
		t.Fatalf("want outboxd running, with the lost transactions from %s logged:\n%s", firstLost, out)
	}
	vals, _ := admScrape(t, f.admin)
	if got := vals["outboxd_missing_transactions_total"]; got < 10 || got > 20 {
		t.Errorf("outboxd_missing_transactions_total = %v, want the 10 rows lost with the old primary and at most a few checkpoint saves", got)
	}
}

// The old primary stops sending on a connection that stays up (no FIN: its path is
// blackholed) after a switchover: source.read_timeout notices the silent stream, the
// blackholed candidate is given up within its bound, and outboxd goes on on the new primary.
func TestFailoverSilentOldPrimary(t *testing.T) {
	var px *faultproxy.Proxy
	f, path := newFailoverWorld(t, func(p *replication.Pair) []string {
		var err error
		if px, err = faultproxy.New(p.Primary().Addr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		return []string{px.Addr(), p.Replica().Addr}
	}, "  read_timeout: 3s\n")
	p := startBinary(t, "run", "--config", path)
	f.commit(0, 20)
	f.kc.waitFor(20, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.pair.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	px.SetMode(faultproxy.Blackhole)
	cut := time.Now()
	f.onPrimary()
	f.commit(20, 40)
	f.kc.waitForEvent("ev039", 60*time.Second)
	took := time.Since(cut)
	checkPerKeyOrder(t, f.kc.settle(500*time.Millisecond), f.ids)
	t.Logf("on the new primary %s after the cut", took)
	if took > 3*time.Second+10*time.Second+15*time.Second {
		t.Errorf("took %s: read_timeout 3s plus one candidate's bound (10s) was expected", took)
	}
	if !strings.Contains(p.output(), "streaming from another source candidate") {
		t.Fatalf("no switch logged:\n%s", p.output())
	}
}

// check inspects every candidate of source.addrs, each as the only source: one that is down is a
// problem of its own, beside the lines of the healthy one.
func TestFailoverCheckEveryCandidate(t *testing.T) {
	f, path := newFailoverWorld(t, func(p *replication.Pair) []string { return []string{p.Primary().Addr, "127.0.0.1:1"} }, "")
	code, out := runBinary(t, "check", "--config", path)
	if code == 0 || !strings.Contains(out, "source 127.0.0.1:1: cannot connect") || !strings.Contains(out, "source "+f.pair.Primary().Addr+": connected as") {
		t.Fatalf("check exited %d without a line for each candidate:\n%s", code, out)
	}
}

// A first candidate that fails the checks (binlog_format=STATEMENT) is skipped at start with a
// warning: outboxd streams from the next one.
func TestFailoverSkipsAnIneligibleCandidate(t *testing.T) {
	bad := mariadb.StartT(t, mariadb.Options{BinlogFormat: "STATEMENT"})
	f, path := newFailoverWorld(t, func(p *replication.Pair) []string { return []string{bad.Addr, p.Primary().Addr} }, "")
	p := startBinary(t, "run", "--config", path)
	f.commit(0, 10)
	f.kc.waitForEvent("ev009", 30*time.Second)
	out := p.output()
	if !strings.Contains(out, "source candidate fails the start-up checks; trying the others") || !strings.Contains(out, "binlog_format") {
		t.Fatalf("no warning naming the ineligible candidate:\n%s", out)
	}
}

// A candidate that has the checkpoint's transactions but no longer the binlogs after them (a
// replica that purged sooner, or one restored from a backup) cannot serve the stream: it is
// skipped with a warning, and outboxd streams from the next candidate, which still has them.
func TestFailoverSkipsACandidateThatPurged(t *testing.T) {
	f, path := newFailoverWorld(t, func(p *replication.Pair) []string { return []string{p.Replica().Addr, p.Primary().Addr} }, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.pair.WaitCaughtUp(ctx); err != nil { // the start position is the primary's
		t.Fatal(err)
	}
	p := startBinary(t, "run", "--config", path)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("outboxd:\n%s", p.output())
		}
	})
	f.commit(0, 10)
	f.kc.waitFor(10, 30*time.Second)
	p.stop(t)
	f.commit(10, 20) // while outboxd is stopped
	if err := f.pair.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := serverDB(t, f.pair.Replica())
	if _, err := rdb.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	var file string
	var pos int64
	var rest []any
	rows, err := rdb.Query("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	rest = make([]any, len(cols)-2)
	for i := range rest {
		rest[i] = new(sql.RawBytes)
	}
	for rows.Next() {
		if err := rows.Scan(append([]any{&file, &pos}, rest...)...); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	// The server keeps a binlog that crash recovery may still need (its binlog checkpoint has
	// not moved on yet): purge until only the new one is left.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := rdb.Exec("PURGE BINARY LOGS TO '" + file + "'"); err != nil {
			t.Fatal(err)
		}
		logs, err := server.BinaryLogs(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		if len(logs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica keeps %v after PURGE BINARY LOGS TO '%s'", logs, file)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p = startBinary(t, "run", "--config", path)
	f.kc.waitForEvent("ev019", 30*time.Second)
	checkPerKeyOrder(t, f.kc.settle(500*time.Millisecond), f.ids)
	out := p.output()
	if !strings.Contains(out, "source candidate skipped: its binlogs no longer reach back to the checkpoint") || !strings.Contains(out, f.pair.Primary().Addr) {
		t.Fatalf("no warning naming the candidate that purged, or not streaming from %s:\n%s", f.pair.Primary().Addr, out)
	}
	if !p.running() {
		t.Fatalf("outboxd exited:\n%s", out)
	}
}
