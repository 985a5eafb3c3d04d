package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// cleanupRows is how many rows TestCleanupUnderLoad* write: 20,000 by default (under a minute
// on two shared cores), OUTBOXD_CLEANUP_ROWS for a longer run (the README reports 200,000).
func cleanupRows(t *testing.T) int {
	if v := os.Getenv("OUTBOXD_CLEANUP_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 20_000
}

// cleanupWorld is an outbox table under load with cleanup on: the mysql store (its saves are
// binlog transactions, so the binlog shows which checkpoint every DELETE came after), and
// every 500th row routed nowhere, so it is dead-lettered.
type cleanupWorld struct {
	*world
	o      cfgOpts
	ckpt   string
	start  string
	c      *consumer
	total  int
	dead   map[string]bool
	writes sync.WaitGroup
	r      *relay // for its cleanup log lines when a wait fails
}

func newCleanupWorld(t *testing.T, block string) *cleanupWorld {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t", "dlq")
	o := simpleCfg(t, w, kc, "")
	o.Tables = []string{w.schema + ".outbox_event\n    columns: {created_at: created_at}"}
	if strings.Contains(block, "retention: 0s") {
		// Keys only: without columns.created_at no sweep runs, so every DELETE is the key path's.
		o.Tables = []string{w.schema + ".outbox_event"}
	}
	o.Routes = "  - match: {topic: t}\n    sink: main\n    topic: t\n"
	o.OnPoison, o.DeadLetter = "dead_letter", "{sink: main, topic: dlq}"
	cw := &cleanupWorld{world: w, o: o, dead: map[string]bool{}}
	cw.ckpt = useMySQLStore(w, &cw.o, "cl-"+w.schema)
	cw.o.Extra = block + "\n"
	// The heartbeat row moves the checkpoint's commit time on once the load is over: the sweep's
	// cutoff follows it (README: a quiet database).
	w.exec("CREATE TABLE " + w.schema + ".heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)")
	cw.o.Source = "  heartbeat: {table: " + w.schema + ".heartbeat, interval: 1s}\n"
	cw.start = w.position()
	cw.o.Start = cw.start // not latest: the load may begin before outboxd resolves it
	cw.c = newConsumer(t, kc, "t", "dlq")
	return cw
}

// load writes n rows from two sessions at once, in transactions of 1 to 20 rows.
func (cw *cleanupWorld) load(n int) {
	t := cw.t
	per := n / 2
	for g := range 2 {
		cw.writes.Go(func() {
			db, err := cw.srv.DB(context.Background(), cw.schema)
			if err != nil {
				t.Error(err)
				return
			}
			defer db.Close()
			for i := 0; i < per; {
				k := min(1+i%20, per-i)
				var b strings.Builder
				b.WriteString("INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ")
				for j := range k {
					id := g*per + i + j
					topic := "t"
					if id%500 == 499 {
						topic = "nowhere"
					}
					if j > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "('e%d', 'k%d', '%s', 'p')", id, id%97, topic)
				}
				if _, err := db.Exec(b.String()); err != nil {
					t.Error(err)
					return
				}
				i += k
			}
		})
	}
	for id := range 2 * per {
		if id%500 == 499 {
			cw.dead[fmt.Sprintf("e%d", id)] = true
		}
	}
	cw.total += 2 * per
}

// left returns the event ids left in the table.
func (cw *cleanupWorld) left() map[string]bool {
	return tableIDsT(cw.t, cw.db, cw.schema+".outbox_event")
}

// waitLeft waits until the table holds exactly the dead-lettered rows.
func (cw *cleanupWorld) waitLeft(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		left := cw.left()
		ok := len(left) == len(cw.dead)
		for id := range cw.dead {
			ok = ok && left[id]
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if cw.r != nil {
				for _, l := range strings.Split(cw.r.logText(), "\n") {
					if strings.Contains(l, "cleanup") {
						cw.t.Log(l)
					}
				}
			}
			cw.t.Fatalf("%d rows left in the table, want the %d dead-lettered ones", len(left), len(cw.dead))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkArrived checks that every row arrived: the delivered ones on t, the dead ones on dlq.
func (cw *cleanupWorld) checkArrived(timeout time.Duration) {
	rs := cw.c.waitFor(cw.total, timeout)
	seen := map[string]string{}
	for _, r := range rs {
		seen[header(r, "event_id")] = r.Topic
	}
	for i := range cw.total {
		id := fmt.Sprintf("e%d", i)
		want := "t"
		if cw.dead[id] {
			want = "dlq"
		}
		if seen[id] != want {
			cw.t.Fatalf("event %s arrived on %q, want %q", id, seen[id], want)
		}
	}
}

// binlogAudit is what the binlog says about the test's schema.
type binlogAudit struct {
	deletes, deletedRows, maxPerDelete int
}

// auditBinlog reads the binlog from cw.start to the server's position and checks, for every
// DELETE transaction on the outbox table: it removes at most batch rows; every row it removes
// was inserted by a transaction the checkpoint row saved before it covers; with minAge, every
// removed row's created_at is at least minAge older than the DELETE.
func (cw *cleanupWorld) auditBinlog(batch int, minAge time.Duration) binlogAudit {
	t := cw.t
	endSeq := gtidSeq(t, cw.position())
	sy := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 4000 + uint32(serverIDs.Add(1)), Flavor: "mariadb", Host: "127.0.0.1", Port: uint16(cw.srv.Port), User: "root",
		Logger: nil, ParseTime: false,
	})
	defer sy.Close()
	startSet, err := mysql.ParseMariadbGTIDSet(cw.start)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sy.StartSyncGTID(startSet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	insertedBy := map[int64]string{} // row id -> GTID of its INSERT
	saved := gtid.Empty(gtid.MariaDB)
	var a binlogAudit
	var cur string
	var txnDeletes int
	var txnTime time.Time
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			t.Fatalf("read binlog: %v", err)
		}
		switch e := ev.Event.(type) {
		case *replication.MariadbGTIDEvent:
			cur = gtid.FormatMariaDB(e.GTID.DomainID, e.GTID.ServerID, e.GTID.SequenceNumber)
			txnDeletes, txnTime = 0, time.Unix(int64(ev.Header.Timestamp), 0)
		case *replication.RowsEvent:
			if string(e.Table.Schema) != cw.schema {
				continue
			}
			switch table := string(e.Table.Table); {
			case table == "outbox_event" && e.Type() == replication.EnumRowsEventTypeInsert:
				for _, r := range e.Rows {
					insertedBy[r[0].(int64)] = cur
				}
			case table == "outbox_event" && e.Type() == replication.EnumRowsEventTypeDelete:
				if txnDeletes == 0 {
					a.deletes++
				}
				txnDeletes += len(e.Rows)
				a.deletedRows += len(e.Rows)
				a.maxPerDelete = max(a.maxPerDelete, txnDeletes)
				if txnDeletes > batch {
					t.Fatalf("DELETE transaction %s removed %d rows, more than batch %d", cur, txnDeletes, batch)
				}
				for _, r := range e.Rows {
					id := r[0].(int64)
					g, ok := insertedBy[id]
					if !ok {
						t.Fatalf("DELETE %s removed row %d whose INSERT is not in the binlog read", cur, id)
					}
					// One domain and one server here: a position covers every lower sequence number.
					if saved.IsEmpty() || gtidSeq(t, g) > gtidSeq(t, saved.String()) {
						t.Fatalf("DELETE %s removed row %d of transaction %s, which the checkpoint saved before it (%s) does not cover", cur, id, g, saved)
					}
					if eid := text(r[1]); cw.dead[eid] {
						t.Fatalf("DELETE %s removed dead-lettered row %s", cur, eid)
					}
					if minAge > 0 {
						created, err := time.ParseInLocation("2006-01-02 15:04:05.999999", text(r[7]), time.Local)
						if err != nil {
							t.Fatal(err)
						}
						// Binlog times are whole seconds: allow one.
						if txnTime.Add(time.Second).Sub(created) < minAge {
							t.Fatalf("DELETE %s at %s removed row %d created at %s, less than %s before", cur, txnTime, id, created, minAge)
						}
					}
				}
			case table == "outboxd_checkpoint" && (e.Type() == replication.EnumRowsEventTypeUpdate || e.Type() == replication.EnumRowsEventTypeInsert):
				row := e.Rows[len(e.Rows)-1] // an UPDATE's after image
				s, err := gtid.Parse(gtid.MariaDB, text(row[2]))
				if err != nil {
					t.Fatal(err)
				}
				saved = s
			}
		}
		if cur != "" && gtidSeq(t, cur) >= endSeq {
			switch e := ev.Event.(type) {
			case *replication.XIDEvent:
				return a
			case *replication.QueryEvent:
				if !strings.EqualFold(string(e.Query), "BEGIN") {
					return a
				}
			}
		}
	}
}

// underLoad writes cleanupRows rows, waits until every one arrived and the table holds only
// the dead-lettered ones, and audits the binlog (see auditBinlog).
func (cw *cleanupWorld) underLoad(batch int, minAge time.Duration) {
	t := cw.t
	n := cleanupRows(t)
	began := time.Now()
	cw.load(n)
	cw.writes.Wait()
	cw.checkArrived(5 * time.Minute)
	cw.waitLeft(time.Minute)
	t.Logf("%d rows written, delivered and deleted in %s", n, time.Since(began).Round(time.Millisecond))
	a := cw.auditBinlog(batch, minAge)
	if a.deletedRows != n-len(cw.dead) {
		t.Fatalf("the binlog shows %d rows deleted, want %d", a.deletedRows, n-len(cw.dead))
	}
	t.Logf("%d DELETE transactions, at most %d rows each", a.deletes, a.maxPerDelete)
}

func TestCleanupUnderLoadRetentionZero(t *testing.T) {
	const batch = 100
	cw := newCleanupWorld(t, fmt.Sprintf("cleanup: {retention: 0s, batch: %d, max_rows_per_second: 50000, interval: 1s, commit_margin: 1s, time_zone: SYSTEM}", batch))
	cw.r = startRelay(t, cw.o, daemon.Options{})
	cw.underLoad(batch, 0)
	if !strings.Contains(cw.r.logText(), "cleanup on") {
		t.Fatal("no cleanup start line in the log")
	}

	// Stopped, outboxd deletes nothing: rows committed meanwhile stay.
	if err := cw.r.stop(t); err != nil {
		t.Fatal(err)
	}
	cw.load(200)
	cw.writes.Wait()
	time.Sleep(3 * time.Second)
	if left := cw.left(); len(left) != len(cw.dead)+200 {
		t.Fatalf("%d rows in the table with outboxd stopped, want %d", len(left), len(cw.dead)+200)
	}
}

func TestCleanupUnderLoadRetentionSweep(t *testing.T) {
	const batch = 250
	const retention = 3 * time.Second
	cw := newCleanupWorld(t, fmt.Sprintf("cleanup: {retention: %s, batch: %d, max_rows_per_second: 50000, interval: 1s, commit_margin: 1s, time_zone: SYSTEM}", retention, batch))
	cw.r = startRelay(t, cw.o, daemon.Options{})
	cw.underLoad(batch, retention)
	// The dead-lettered rows stay, counted as unproven.
	if !strings.Contains(cw.r.logText(), "rows kept without proof of delivery") {
		t.Fatal("no warning about the dead-lettered rows kept")
	}
}

// text is a decoded binlog value as text (go-mysql gives VARCHAR as string, TEXT as []byte).
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return fmt.Sprint(v)
}

// Cleanup is the leader's duty: a standby deletes nothing, even rows the checkpoint has long
// covered; once it leads, the created_at sweep takes the rows delivered before it started
// (their keys were never in its memory: the restart case).
func TestCleanupLeaderOnly(t *testing.T) {
	hold := "commit_margin: 1s, interval: 1s, batch: 100"
	// A first run records dead letters but keeps every row (an hour's retention).
	cw := newCleanupWorld(t, "ha: {enabled: true}\ncleanup: {retention: 1h, time_zone: SYSTEM, "+hold+"}")
	r1 := startRelay(t, cw.o, daemon.Options{})
	cw.load(1000)
	cw.writes.Wait()
	cw.checkArrived(time.Minute)
	waitStoreRow(t, cw.db, cw.ckpt, "cl-"+cw.schema, cw.position(), 30*time.Second)
	if err := r1.stop(t); err != nil {
		t.Fatal(err)
	}
	if left := cw.left(); len(left) != 1000 {
		t.Fatalf("%d of 1000 rows left after a run with an hour's retention", len(left))
	}

	// The test holds the leader lock: outboxd with a retention of a second stands by.
	lock, err := cw.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	var got int
	if err := lock.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 0)", lockNameOf(cw.o, "cl-"+cw.schema)).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK = %d, %v", got, err)
	}
	cw.o.Extra = "ha: {enabled: true}\ncleanup: {retention: 1s, time_zone: SYSTEM, " + hold + "}\n"
	cw.r = startRelay(t, cw.o, daemon.Options{})
	time.Sleep(5 * time.Second)
	if left := cw.left(); len(left) != 1000 {
		t.Fatalf("a standby deleted rows: %d of 1000 left", len(left))
	}
	if strings.Contains(cw.r.logText(), `"message":"starting"`) {
		t.Fatal("outboxd leads although the test holds the lock")
	}
	// Leading, it sweeps the rows the first run delivered (their keys were never in its
	// memory), found on the broker, and keeps the dead-lettered ones.
	if _, err := lock.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", lockNameOf(cw.o, "cl-"+cw.schema)); err != nil {
		t.Fatal(err)
	}
	cw.waitLeft(time.Minute)
}

// check says what cleanup needs on the writer and fails without it; run refuses with the same
// lines: DELETE on the outbox table, and SLAVE MONITOR to see that the writer is no replica. A
// cleanup.hold_table, no longer used, is a warning.
func TestCleanupCheckNeedsDelete(t *testing.T) {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	user := "cl" + w.schema
	w.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO '" + user + "'@'%'")
	o := simpleCfg(t, w, kc, "")
	o.User, o.Pass = user, "pw"
	o.Tables = []string{w.schema + ".outbox_event\n    columns: {created_at: created_at}"}
	o.Extra = "cleanup: {retention: 168h, time_zone: SYSTEM, hold_table: " + w.schema + ".cleanup_hold}\n"
	path := writeCfg(t, o)
	code, out := runBinary(t, "run", "--config", path)
	ccode, cout := runBinary(t, "check", "--config", path)
	if code != 1 || ccode != 1 {
		t.Fatalf("run exited %d, check %d; want 1 and 1:\nrun:\n%s\ncheck:\n%s", code, ccode, out, cout)
	}
	for _, want := range []string{
		"DELETE ON " + w.schema + ".outbox_event is not granted to '" + user + "'@'%'",
		"GRANT DELETE ON `" + w.schema + "`.`outbox_event` TO '" + user + "'@'%'",
		"[check cleanup_grants]",
		"cleanup writer " + o.Srv.Addr + ": cleanup.hold_table " + w.schema + ".cleanup_hold is set, but no longer used",
		"remove cleanup.hold_table from the configuration",
		"SLAVE MONITOR is not granted to '" + user + "'@'%' (cleanup must see that the writer is no replica",
		"[check cleanup_writer]",
	} {
		if !strings.Contains(out, want) || !strings.Contains(cout, want) {
			t.Errorf("want %q in both:\nrun:\n%s\ncheck:\n%s", want, out, cout)
		}
	}
	if strings.Contains(out, `"message":"starting"`) {
		t.Fatalf("run got as far as starting:\n%s", out)
	}
	// With the grant, check passes it, and still warns about the hold table.
	w.exec("GRANT DELETE ON " + w.schema + ".outbox_event TO '" + user + "'@'%'")
	w.exec("GRANT SLAVE MONITOR ON *.* TO '" + user + "'@'%'")
	ccode, cout = runBinary(t, "check", "--config", path)
	if ccode != 0 || !strings.Contains(cout, "DELETE is granted (cleanup is on) [check cleanup_grants]") ||
		!strings.Contains(cout, "[check cleanup_hold]") ||
		!strings.Contains(cout, "is a writable primary (read_only OFF, no replication configured) [check cleanup_writer]") {
		t.Fatalf("check exited %d:\n%s", ccode, cout)
	}
}

// A DATETIME created_at is wall-clock time of the writing session's zone: check and run refuse
// the created_at sweep without cleanup.time_zone, and a zone the server does not know, with
// the same lines; a known zone passes.
func TestCleanupCheckDatetimeTimeZone(t *testing.T) {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	o.Tables = []string{w.schema + ".outbox_event\n    columns: {created_at: created_at}"}
	for _, tc := range []struct{ tz, want string }{
		{"", "column " + w.schema + ".outbox_event.created_at is a DATETIME (wall-clock time in whatever time_zone the inserting session had) without cleanup.time_zone: set cleanup.time_zone"},
		{"time_zone: Mars/Olympus, ", "cleanup.time_zone Mars/Olympus is unknown to the server"},
	} {
		o.Extra = "cleanup: {retention: 168h, " + strings.TrimSuffix(tc.tz, ", ") + "}\n"
		path := writeCfg(t, o)
		code, out := runBinary(t, "run", "--config", path)
		ccode, cout := runBinary(t, "check", "--config", path)
		if code != 1 || ccode != 1 || !strings.Contains(out, tc.want) || !strings.Contains(cout, tc.want) || !strings.Contains(cout, "[check cleanup_table]") {
			t.Fatalf("%q: run exited %d, check %d; want 1 and 1 with %q:\nrun:\n%s\ncheck:\n%s", tc.tz, code, ccode, tc.want, out, cout)
		}
		if strings.Contains(out, `"message":"starting"`) {
			t.Fatalf("run got as far as starting:\n%s", out)
		}
	}
	o.Extra = "cleanup: {retention: 168h, time_zone: \"+00:00\"}\n"
	if ccode, cout := runBinary(t, "check", "--config", writeCfg(t, o)); ccode != 0 || !strings.Contains(cout, "a DATETIME/TIMESTAMP created_at [check cleanup_table]") {
		t.Fatalf("check exited %d:\n%s", ccode, cout)
	}
}

// retention: 0 deletes by the key the TABLE_MAP carries only with binlog_row_metadata=FULL:
// with MINIMAL accepted, check warns that the table is never deleted by key.
func TestCleanupCheckWarnsMinimalRowMetadata(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{RowMetadata: "MINIMAL"})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	o.Source = "  allow_minimal_row_metadata: true\n"
	o.Extra = "cleanup: {retention: 0s}\n"
	code, out := runBinary(t, "check", "--config", writeCfg(t, o))
	want := "source " + o.Srv.Addr + ": cleanup of " + w.schema + ".outbox_event (retention: 0) is without primary keys from the binlog (binlog_row_metadata is MINIMAL: TABLE_MAP events carry no primary key), so nothing of the table is ever deleted: set binlog_row_metadata = FULL"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("check exited %d, want 0 with %q:\n%s", code, want, out)
	}
}
