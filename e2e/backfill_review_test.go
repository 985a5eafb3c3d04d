package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// A backfill while an XA transaction is prepared: its XA PREPARE is in the binlog before the
// snapshot's position, its rows are not in the snapshot (not committed yet), so a checkpoint at
// that position would let run see only its XA COMMIT, without the rows: lost. The backfill must
// refuse, set no checkpoint and say what to do; after the XA COMMIT it succeeds and every row
// arrives once.
func TestBackfillRefusesPreparedXA(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "t")
	// The README's grants only: XA RECOVER needs no more on MariaDB.
	user := "xauser" + w.schema
	w.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO '" + user + "'@'%'")
	t.Cleanup(func() { _, _ = w.db.Exec("DROP USER '" + user + "'@'%'") })
	o := simpleCfg(t, w, c, "")
	o.User, o.Pass = user, "pw"
	cfgPath := writeCfg(t, o)
	for _, id := range []string{"pre-1", "pre-2"} {
		w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, biz_key, topic, payload) VALUES (?, 'k', 't', ?)", id, id)
	}
	xaPrepare(w, "'bfxa'", "xa-1")
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if code == 0 {
		w.exec("XA COMMIT 'bfxa'")
		startRelay(t, o, daemon.Options{})
		cons := newConsumer(t, c, "t")
		rs := cons.waitFor(3, 5*time.Second)
		t.Fatalf("backfill succeeded with XA 'bfxa' prepared (checkpoint %s); after its XA COMMIT run delivered %d of 3 rows:\n%s",
			readCheckpoint(t, o.Dir), len(rs), out)
	}
	if !strings.Contains(out, "prepared XA transaction(s) at the snapshot ('bfxa')") {
		t.Fatalf("backfill refused without naming the prepared XA transaction:\n%s", out)
	}
	if got := readCheckpoint(t, o.Dir); got != "" {
		t.Fatalf("refused backfill saved checkpoint %s", got)
	}
	w.exec("XA COMMIT 'bfxa'")
	if code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event"); code != 0 {
		t.Fatalf("backfill after the XA COMMIT exited %d:\n%s", code, out)
	}
	startRelay(t, o, daemon.Options{})
	cons := newConsumer(t, c, "t")
	cons.waitFor(3, 30*time.Second)
	rs := cons.settle(time.Second)
	if len(rs) != 3 {
		t.Fatalf("got %d records, want 3 (each row once)", len(rs))
	}
}
