package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/replication"
)

// rowsIn counts the rows of schema's outbox table on db.
func rowsIn(t *testing.T, db *sql.DB, schema string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + schema + ".outbox_event").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A cleanup writer that is a replica (read_only OFF, the default, so root and any account may
// write there) or read-only is named by check, with the key to set, and refused by run with
// the same line: a DELETE on the replica would be its own transaction and stop its replication
// at the primary's next one. Nothing is deleted on the replica.
func TestCleanupWriterMustBePrimary(t *testing.T) {
	pair := replication.StartPair(t, replication.Options{})
	w := newWorld(t, pair.Primary())
	start := w.position()
	for i := range 5 {
		w.commit(row{EventID: fmt.Sprintf("ev%d", i), Key: "k", Topic: "t", Payload: []byte("p")})
	}
	if err := pair.WaitCaughtUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	replica := serverDB(t, pair.Replica())
	if _, err := replica.Exec("SET GLOBAL read_only = 0"); err != nil {
		t.Fatal(err)
	}
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, start)
	o.Srv = pair.Replica() // source.addr the replica, no checkpoint.writer_addr: cleanup writes there
	o.Extra = "cleanup: {retention: 0s}\n"
	path := writeCfg(t, o)
	prefix := "cleanup writer " + pair.Replica().Addr + ": "
	refused := func(want ...string) {
		t.Helper()
		code, out := runBinary(t, "check", "--config", path)
		if code == 0 {
			t.Fatalf("check passed a cleanup writer that is no writable primary:\n%s", out)
		}
		want = append(want, "set checkpoint.writer_addr to the writable primary", "or turn cleanup off", "[check cleanup_writer]")
		for _, s := range want {
			if !strings.Contains(out, s) {
				t.Fatalf("check does not say %q:\n%s", s, out)
			}
		}
		code, rout := runBinary(t, "run", "--config", path)
		if code != 1 || strings.Contains(rout, `"message":"starting"`) {
			t.Fatalf("run exited %d, want 1 before starting:\n%s", code, rout)
		}
		for _, s := range want {
			if !strings.Contains(rout, s) {
				t.Fatalf("run does not say %q:\n%s", s, rout)
			}
		}
		if n := rowsIn(t, replica, w.schema); n != 5 {
			t.Fatalf("%d of 5 rows left on the replica", n)
		}
	}
	refused(prefix+"replication is configured on the cleanup writer (connection '', Master_Host 127.0.0.1", "Slave_IO_Running Yes")
	if _, err := replica.Exec("SET GLOBAL read_only = 1"); err != nil {
		t.Fatal(err)
	}
	refused(prefix + "read_only is ON on the cleanup writer")
	if err := pair.WaitCaughtUp(t.Context()); err != nil {
		t.Fatalf("replication broke: %v", err)
	}
}

// A writer that turns into a replica while outboxd runs (a switchover makes the old primary a
// read-only replica of the new one) stops cleanup: an error log and outboxd_cleanup_stopped,
// no DELETE on it (which would stop its replication under gtid_strict_mode, and with it what
// outboxd reads), while the relay goes on delivering what the new primary commits.
func TestCleanupStopsWhenWriterBecomesReplica(t *testing.T) {
	pair := replication.StartPair(t, replication.Options{})
	w := newWorld(t, pair.Primary())
	old := serverDB(t, pair.Primary())
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	admin := admFreeAddr(t)
	o.Extra = fmt.Sprintf("cleanup: {retention: 0s}\nadmin: {listen: %q}\n", admin)
	c := newConsumer(t, kc, "t")
	r := startRelay(t, o, daemon.Options{})
	commit := func(from, to int) {
		for i := from; i < to; i++ {
			w.commit(row{EventID: fmt.Sprintf("ev%02d", i), Key: fmt.Sprintf("k%d", i%3), Topic: "t", Payload: []byte("p")})
		}
	}
	commit(0, 10)
	c.waitFor(10, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for rowsIn(t, old, w.schema) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("cleanup did not delete the delivered rows on the primary:\n%s", r.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := pair.WaitCaughtUp(t.Context()); err != nil {
		t.Fatal(err)
	}

	if err := pair.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	// outboxd still reads the old primary, now a replica (log_slave_updates): what the new
	// primary commits reaches it there.
	w = &world{t: t, srv: pair.Primary(), db: serverDB(t, pair.Primary()), schema: w.schema}
	commit(10, 20)
	c.waitFor(20, 30*time.Second)
	// Wait until cleanup either stopped or deleted on the old primary (today's bug).
	stopped := func() bool {
		_, fams := admScrape(t, admin)
		ro, _ := metricValue(fams, "outboxd_cleanup_stopped", map[string]string{"reason": "read_only"})
		rep, _ := metricValue(fams, "outboxd_cleanup_stopped", map[string]string{"reason": "replica"})
		return ro+rep == 1
	}
	deadline = time.Now().Add(30 * time.Second)
	for !stopped() && rowsIn(t, old, w.schema) == 10 {
		if time.Now().After(deadline) {
			t.Fatalf("no outboxd_cleanup_stopped{reason=read_only|replica} 1:\n%s", r.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := rowsIn(t, old, w.schema); n != 10 {
		t.Fatalf("%d of the 10 rows committed after the switchover left on the old primary: cleanup deleted on a replica", n)
	}
	if !strings.Contains(r.logText(), `"level":"error"`) || !strings.Contains(r.logText(), "cleanup stopped: the writer is no writable primary") {
		t.Fatalf("no error log of the stop:\n%s", r.logText())
	}
	// More after the stop: still delivered, kept, and the old primary still replicates.
	commit(20, 30)
	c.waitFor(30, 30*time.Second)
	if err := pair.WaitCaughtUp(context.Background()); err != nil {
		t.Fatalf("the old primary's replication broke: %v", err)
	}
	if n := rowsIn(t, old, w.schema); n != 20 {
		t.Fatalf("%d of the 20 rows committed after the switchover left on the old primary", n)
	}
}
