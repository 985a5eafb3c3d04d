package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// useMySQLStore creates w's checkpoint table with the store's own DDL and points o at it.
func useMySQLStore(w *world, o *cfgOpts, name string) string {
	table := w.schema + ".outboxd_checkpoint"
	w.exec(checkpoint.CreateTableSQL(table))
	o.Checkpoint = fmt.Sprintf("store: mysql, table: %s, name: %s", table, name)
	return table
}

// lockNameOf is the default leader lock name of o with checkpoint.name name.
func lockNameOf(o cfgOpts, name string) string {
	tables := make([]string, 0, len(o.Tables))
	for _, t := range o.Tables {
		name, _, _ := strings.Cut(t, "\n") // an entry may carry more YAML lines
		tables = append(tables, name)
	}
	return config.DefaultLockName(name, tables)
}

// storeRow reads the checkpoint row: its gtid_set and saved_at ("" when there is none).
func storeRow(t *testing.T, db *sql.DB, table, name string) (set, savedAt string) {
	t.Helper()
	err := db.QueryRow("SELECT gtid_set, saved_at FROM "+table+" WHERE name = ?", name).Scan(&set, &savedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return set, savedAt
}

// waitStoreRow waits until the row covers want (it may cover outboxd's own saves beyond it).
func waitStoreRow(t *testing.T, db *sql.DB, table, name, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ws, err := gtid.Parse(gtid.MariaDB, want)
	if err != nil {
		t.Fatal(err)
	}
	for {
		got, _ := storeRow(t, db, table, name)
		if gs, err := gtid.Parse(gtid.MariaDB, got); err == nil && got != "" && gs.Contains(ws) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint row is %q, want it to cover %q within %s", got, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With checkpoint.store: mysql rows are delivered and the row advances; once idle, outboxd
// reading back its own saves does not save again (the row and the server's binlog position
// stay put over many intervals) and the lag stays 0; a graceful stop saves once more.
func TestMySQLStoreDeliversAndStaysQuietWhenIdle(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	table := useMySQLStore(w, &o, "relay-a")
	admin := freeAddr(t)
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	r := startRelay(t, o, daemon.Options{})

	var last string
	for i := 0; i < 20; i++ {
		last = w.commit(row{EventID: fmt.Sprintf("ev%02d", i), Key: fmt.Sprintf("k%d", i%3), Topic: "t", Payload: []byte("x")})
	}
	c := newConsumer(t, kc, "t")
	c.waitFor(20, 30*time.Second)
	waitStoreRow(t, w.db, table, "relay-a", last, 10*time.Second)

	// Quiet: the saves read back are no progress. Wait for the lag to settle at 0 (a source
	// heartbeat after the last transaction), then watch 30 intervals of 100ms.
	var vals map[string]float64
	admWaitFor(t, 15*time.Second, func() string { return fmt.Sprintf("lag %v", vals["outboxd_lag_seconds"]) }, func() bool {
		vals, _ = admScrape(t, admin)
		return vals["outboxd_lag_seconds"] == 0 && vals["outboxd_heartbeats_received_total"] > 0
	})
	set0, saved0 := storeRow(t, w.db, table, "relay-a")
	pos0 := w.position()
	for i := 0; i < 15; i++ {
		time.Sleep(200 * time.Millisecond)
		if v, _ := admScrape(t, admin); v["outboxd_lag_seconds"] != 0 {
			t.Fatalf("lag %v while idle with the mysql store", v["outboxd_lag_seconds"])
		}
	}
	set1, saved1 := storeRow(t, w.db, table, "relay-a")
	if set1 != set0 || saved1 != saved0 {
		t.Fatalf("idle server: the checkpoint row was written again (%s at %s -> %s at %s)", set0, saved0, set1, saved1)
	}
	if pos := w.position(); pos != pos0 {
		t.Fatalf("idle server: the binlog moved from %s to %s (outboxd saving its own saves?)", pos0, pos)
	}
	// The last save was itself a transaction, read back and not saved for: the server is
	// exactly one transaction (that save) past the row.
	if gtidSeq(t, pos0) != gtidSeq(t, set0)+1 || gtidSeq(t, set0) < gtidSeq(t, last) {
		t.Fatalf("idle: row %s, server %s; want the row at %s or later and the server one save further", set0, pos0, last)
	}

	// A business transaction without outbox rows is progress: it is saved.
	w.exec("INSERT INTO " + w.schema + ".orders (customer) VALUES ('c')")
	after := w.position()
	waitStoreRow(t, w.db, table, "relay-a", after, 10*time.Second)

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// The stop saves what is acknowledged, own saves included: the position at the stop.
	final, _ := storeRow(t, w.db, table, "relay-a")
	fs, err := gtid.Parse(gtid.MariaDB, final)
	if err != nil {
		t.Fatal(err)
	}
	as, _ := gtid.Parse(gtid.MariaDB, after)
	if !fs.Contains(as) {
		t.Fatalf("checkpoint after the stop %s does not cover %s", final, after)
	}
}

// The mysql store across crashes: kill -9 of outboxd, then kill -9 of MariaDB (the writer and
// the source) while rows flow. Nothing committed is lost, per-key order holds, duplicates are
// only of transactions after the row saved before the outboxd crash, and the outage of the
// server (saves failing with it) takes the reconnect path: the process does not exit.
func TestMySQLStoreSurvivesKills(t *testing.T) { testMySQLStoreSurvivesKills(t, false) }

// The same with ha on (one instance): the restarted outboxd takes the lock the killed one held,
// and MariaDB's crash drops the lock connection: the leader fences, and once the server is back
// it leads again under the next epoch, with nothing lost.
func TestHAMySQLStoreSurvivesKills(t *testing.T) { testMySQLStoreSurvivesKills(t, true) }

func testMySQLStoreSurvivesKills(t *testing.T, ha bool) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Interval = "200ms"
	table := useMySQLStore(w, &o, "relay-k")
	admin := admFreeAddr(t)
	if ha {
		o.Extra = fmt.Sprintf("ha: {enabled: true, lease: 2s}\nadmin: {listen: %q}\n", admin)
	}
	cfgPath := writeCfg(t, o)

	var committed []string
	gtidOf := map[string]string{}
	commitN := func(db *sql.DB, from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("ev%04d", i)
			wc := &world{t: t, srv: srv, db: db, schema: w.schema}
			gtidOf[id] = wc.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%7), Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
		}
	}
	p := startBinary(t, "run", "--config", cfgPath)
	commitN(w.db, 0, 100)
	c := newConsumer(t, kc, "t")
	c.waitFor(100, 30*time.Second)
	waitStoreRow(t, w.db, table, "relay-k", gtidOf["ev0099"], 10*time.Second)
	commitN(w.db, 100, 200)
	c.waitFor(110, 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	saved, _ := storeRow(t, w.db, table, "relay-k")
	savedSeq := gtidSeq(t, saved)
	if savedSeq < gtidSeq(t, gtidOf["ev0099"]) {
		t.Fatalf("checkpoint row %s went backwards", saved)
	}
	commitN(w.db, 200, 230) // while outboxd is down

	p2 := startBinary(t, "run", "--config", cfgPath)
	c.waitForEvent("ev0229", 60*time.Second)
	in := &haInstance{name: "p2", admin: admin, p: p2}
	var term haStatus
	if ha {
		term, _ = haWaitRole(t, in, "leader", 10*time.Second)
	}

	// MariaDB crashes under a running outboxd: saves and the stream fail together.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several save intervals with the server gone
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, mariadb.Options{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p2.done:
		t.Fatalf("outboxd exited while MariaDB was down:\n%s", p2.output())
	default:
	}
	db, err := srv.DB(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	commitN(db, 230, 260)
	c.waitForEvent("ev0259", 60*time.Second)
	rs := c.settle(500 * time.Millisecond)
	checkPerKeyOrder(t, rs, committed)
	count := map[string]int{}
	for _, r := range rs {
		count[header(r, "event_id")]++
	}
	for id, n := range count {
		if n > 1 && gtidSeq(t, gtidOf[id]) <= savedSeq {
			t.Fatalf("event %s (GTID %s) resent though the checkpoint row %s covered it", id, gtidOf[id], saved)
		}
	}
	waitStoreRow(t, db, table, "relay-k", gtidOf["ev0259"], 15*time.Second)
	if ha {
		// The lock connection died with the server: a fence, then a new term.
		again, _ := haWaitRole(t, in, "leader", 10*time.Second)
		if _, ok := in.lastRoleChange("fenced"); !ok || again.Epoch <= term.Epoch {
			t.Errorf("after MariaDB's crash: epoch %d -> %d, role changes %+v; want a fence and a later epoch", term.Epoch, again.Epoch, in.roleChanges())
		}
		var epoch int64
		var holder string
		if err := db.QueryRow("SELECT epoch, holder FROM "+table+" WHERE name = 'relay-k'").Scan(&epoch, &holder); err != nil {
			t.Fatal(err)
		}
		if epoch != again.Epoch || holder != again.Holder {
			t.Errorf("row token %s %d, want the leader's %s %d", holder, epoch, again.Holder, again.Epoch)
		}
	} else if !strings.Contains(p2.output(), "reconnecting") {
		t.Errorf("no reconnect logged:\n%s", p2.output())
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("graceful stop exited %d:\n%s", code, p2.output())
	}
}

// check names the missing table and grants with the statements that fix them; a run whose
// account may not UPDATE the table stops at once saying which GRANT to run; checkpoint
// migrate, show and set work on the row.
func TestMySQLStoreCheckAndCommands(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	user := "ck" + w.schema
	w.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO '" + user + "'@'%'")
	o.User, o.Pass = user, "pw"
	table := w.schema + ".outboxd_checkpoint"
	o.Checkpoint = fmt.Sprintf("store: mysql, table: %s, name: relay-c", table)
	cfgPath := writeCfg(t, o)
	quoted := "`" + w.schema + "`.`outboxd_checkpoint`"

	// (a) No table yet.
	code, out := runBinary(t, "check", "--config", cfgPath)
	if code != 1 {
		t.Fatalf("check exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"CREATE TABLE " + quoted, "gtid_set    TEXT", "GRANT SELECT, INSERT, UPDATE ON " + quoted + " TO '" + user + "'@'%'", "[check checkpoint_table]"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	// (b) The table exists; the account may read and insert but not update.
	w.exec(checkpoint.CreateTableSQL(table))
	w.exec("GRANT SELECT, INSERT ON " + table + " TO '" + user + "'@'%'")
	code, out = runBinary(t, "check", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "UPDATE ON "+table) || !strings.Contains(out, "GRANT SELECT, INSERT, UPDATE ON "+quoted) ||
		!strings.Contains(out, "[check checkpoint_grants]") || strings.Contains(out, "FAIL  source "+o.Srv.Addr+": table "+table) {
		t.Errorf("check with UPDATE missing, exit %d:\n%s", code, out)
	}
	// run stops at its first save with the fix (an UPDATE denied is no outage to wait out).
	code, out = runBinary(t, "run", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "UPDATE command denied") || !strings.Contains(out, "GRANT SELECT, INSERT, UPDATE ON "+quoted) {
		t.Fatalf("run without UPDATE: exit %d:\n%s", code, out)
	}

	// (c) Granted: check passes for the store.
	w.exec("GRANT SELECT, INSERT, UPDATE ON " + table + " TO '" + user + "'@'%'")
	code, out = runBinary(t, "check", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "SELECT, INSERT and UPDATE are granted [check checkpoint_grants]") ||
		!strings.Contains(out, "exists with the checkpoint store's columns [check checkpoint_table]") {
		t.Fatalf("check with the grants, exit %d:\n%s", code, out)
	}

	// (d) migrate a checkpoint file into the row, then show and set.
	file := filepath.Join(t.TempDir(), "old.json")
	fst, err := checkpoint.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	pos := w.position()
	if err := fst.Save(t.Context(), checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: pos, File: "mysql-bin.000001", Pos: 77}); err != nil {
		t.Fatal(err)
	}
	fst.Close()
	code, out = runBinary(t, "checkpoint", "show", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "no checkpoint") {
		t.Fatalf("show before migrate: exit %d:\n%s", code, out)
	}
	code, out = runBinary(t, "checkpoint", "migrate", "--config", cfgPath, "--from-file", file)
	if code != 0 || !strings.Contains(out, pos) {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	if got, _ := storeRow(t, w.db, table, "relay-c"); got != pos {
		t.Fatalf("row after migrate %q, want %q", got, pos)
	}
	code, out = runBinary(t, "checkpoint", "show", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, `"gtid_set": "`+pos+`"`) || !strings.Contains(out, `"binlog_pos": 77`) {
		t.Fatalf("show: exit %d:\n%s", code, out)
	}
	code, out = runBinary(t, "checkpoint", "migrate", "--config", cfgPath, "--from-file", file)
	if code != 1 || !strings.Contains(out, "--overwrite") {
		t.Fatalf("second migrate: exit %d:\n%s", code, out)
	}
	w.commit(row{EventID: "s1", Key: "k", Topic: "t", Payload: []byte("x")})
	next := w.position()
	code, out = runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", next)
	if code != 0 || !strings.Contains(out, pos+" -> "+next) {
		t.Fatalf("set: exit %d:\n%s", code, out)
	}
	if got, _ := storeRow(t, w.db, table, "relay-c"); got != next {
		t.Fatalf("row after set %q, want %q", got, next)
	}

	// (e) UPDATE revoked under a running outboxd: the next save stops it at once (not after
	// the 30 s a file store's failing saves get), saying which GRANT to run.
	r := startRelay(t, o, daemon.Options{})
	g := w.commit(row{EventID: "s2", Key: "k", Topic: "t", Payload: []byte("x")})
	waitStoreRow(t, w.db, table, "relay-c", g, 10*time.Second)
	w.exec("REVOKE UPDATE ON " + table + " FROM '" + user + "'@'%'")
	began := time.Now()
	w.commit(row{EventID: "s3", Key: "k", Topic: "t", Payload: []byte("x")})
	select {
	case err := <-r.done:
		close(r.done)
		if err == nil || !errors.Is(err, checkpoint.ErrStoreMisconfigured) || !strings.Contains(err.Error(), "GRANT SELECT, INSERT, UPDATE ON "+quoted) {
			t.Fatalf("run stopped with %v", err)
		}
		if d := time.Since(began); d > 10*time.Second {
			t.Fatalf("stopped after %s", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("outboxd still runs with UPDATE revoked:\n%s", r.logText())
	}
}

// The writer (checkpoint.writer_addr, here a proxy in front of the same server) goes away while
// the binlog source stays up: the failed save ends the session as a lost stream does, outboxd
// waits for the writer and goes on; it does not exit, and nothing is lost.
func TestMySQLStoreWriterOutageReconnects(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	table := useMySQLStore(w, &o, "relay-w")
	px := proxyTo(t, w.srv.Addr)
	o.Checkpoint += ", writer_addr: " + px.Addr()
	r := startRelay(t, o, daemon.Options{})
	c := newConsumer(t, kc, "t")

	first := w.commit(row{EventID: "a0", Key: "k", Topic: "t", Payload: []byte("x")})
	waitStoreRow(t, w.db, table, "relay-w", first, 10*time.Second)

	px.SetMode(faultproxy.DropNew)
	px.ResetAll()
	var last string
	for i := 1; i <= 5; i++ {
		last = w.commit(row{EventID: fmt.Sprintf("a%d", i), Key: "k", Topic: "t", Payload: []byte("x")})
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(r.logText(), "checkpoint writer not reachable") {
		if time.Now().After(deadline) {
			t.Fatalf("no wait for the writer logged:\n%s", r.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-r.done:
		t.Fatalf("outboxd stopped while the writer was away: %v", err)
	default:
	}
	if got, _ := storeRow(t, w.db, table, "relay-w"); gtidSeq(t, got) >= gtidSeq(t, last) {
		t.Fatalf("row moved to %q while the writer was away", got)
	}
	px.SetMode(faultproxy.Pass)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(r.logText(), "\n") {
				if !strings.Contains(l, `"level":"debug"`) {
					t.Log(l)
				}
			}
		}
	})
	waitStoreRow(t, w.db, table, "relay-w", last, 20*time.Second)
	c.waitForEvent("a5", 10*time.Second)
	rs := c.settle(300 * time.Millisecond)
	checkPerKeyOrder(t, rs, []string{"a0", "a1", "a2", "a3", "a4", "a5"})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
