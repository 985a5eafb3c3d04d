package e2e

import (
	"fmt"
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

// Keyset pages over a primary key that is not an integer: BINARY(16) values with bytes that are
// not UTF-8 (a UUID key), then a composite key (VARCHAR, INT), pages of 2: every row arrives
// once, in primary-key order.
func TestBackfillNonIntegerPrimaryKeys(t *testing.T) {
	for _, tc := range []struct {
		name, ddl string
		rows      []string // INSERT value lists for (pk..., event_id)
		want      []string // event ids in primary-key order
	}{
		{"binary16", "ADD COLUMN uid BINARY(16) NOT NULL FIRST, ADD PRIMARY KEY (uid)",
			[]string{"(UNHEX('FF000000000000000000000000000001'), 'e4')", "(UNHEX('00C3280000000000000000000000000A'), 'e1')",
				"(UNHEX('80808080808080808080808080808080'), 'e3')", "(UNHEX('7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF'), 'e2')",
				"(UNHEX('FFFE0000000000000000000000000000'), 'e5')"},
			[]string{"e1", "e2", "e3", "e4", "e5"}},
		{"composite", "ADD COLUMN tenant VARCHAR(16) NOT NULL FIRST, ADD COLUMN seq INT NOT NULL AFTER tenant, ADD PRIMARY KEY (tenant, seq)",
			[]string{"('b', 1, 'e4')", "('a', 10, 'e3')", "('a', 2, 'e2')", "('a', 1, 'e1')", "('c', 0, 'e5')"},
			[]string{"e1", "e2", "e3", "e4", "e5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			w.exec("ALTER TABLE " + w.schema + ".outbox_event DROP COLUMN id, " + tc.ddl)
			c := kafkaCluster(t, "t")
			o := simpleCfg(t, w, c, "")
			cfgPath := writeCfg(t, o)
			cols := "uid, event_id"
			if tc.name == "composite" {
				cols = "tenant, seq, event_id"
			}
			for _, r := range tc.rows {
				w.exec("INSERT INTO " + w.schema + ".outbox_event (" + cols + ") VALUES " + r)
			}
			w.exec("UPDATE " + w.schema + ".outbox_event SET biz_key = 'k', topic = 't', payload = event_id")
			code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--batch", "2")
			if code != 0 {
				t.Fatalf("backfill exited %d:\n%s", code, out)
			}
			cons := newConsumer(t, c, "t")
			cons.waitFor(len(tc.want), 30*time.Second)
			rs := cons.settle(500 * time.Millisecond)
			var got []string
			for _, r := range rs {
				got = append(got, header(r, "event_id"))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("backfill sent %v, want %v (each once, in primary-key order):\n%s", got, tc.want, out)
			}
		})
	}
}

// A composite primary key is paged by a range the server can seek to: each page reads about
// its own rows, so the whole backfill reads each row about once, not the table from its start
// for every page (quadratic on a large table). Measured by the server's Handler_read_next over
// the backfill, which nothing else in this test process reads meanwhile.
func TestBackfillCompositeKeyPagesSeek(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec("ALTER TABLE " + w.schema + ".outbox_event DROP COLUMN id, ADD COLUMN tenant VARCHAR(16) NOT NULL FIRST, " +
		"ADD COLUMN seq INT NOT NULL AFTER tenant, ADD PRIMARY KEY (tenant, seq)")
	const n = 3000
	for off := 0; off < n; off += 500 {
		var vals []string
		for i := off; i < off+500; i++ {
			vals = append(vals, fmt.Sprintf("('t%02d', %d, 'e%d', 'k', 't', 'x')", i%20, i, i))
		}
		w.exec("INSERT INTO " + w.schema + ".outbox_event (tenant, seq, event_id, biz_key, topic, payload) VALUES " + strings.Join(vals, ", "))
	}
	c := kafkaCluster(t, "t")
	o := simpleCfg(t, w, c, "")
	cfgPath := writeCfg(t, o)
	readNext := func() int {
		var name string
		var v int
		if err := w.db.QueryRow("SHOW GLOBAL STATUS LIKE 'Handler_read_next'").Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := readNext()
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--batch", "100")
	reads := readNext() - before
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, fmt.Sprintf("%d rows sent", n)) {
		t.Fatalf("backfill did not send %d rows:\n%s", n, out)
	}
	if reads > 3*n {
		t.Fatalf("backfill of %d rows in pages of 100 read %d index entries (Handler_read_next): each page scans from the table's start", n, reads)
	}
	t.Logf("%d rows, Handler_read_next %d", n, reads)
}

// A --where naming a column the table lacks: one error naming the column, before anything is
// sent, and no checkpoint. A table without a primary key: refused before the snapshot.
func TestBackfillWhereTypo(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "t")
	o := simpleCfg(t, w, c, "")
	cfgPath := writeCfg(t, o)
	w.exec("INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES ('a', 'k', 't', 'a')")
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--where", "stauts = 0")
	if code != 1 || strings.Count(out, "Unknown column 'stauts'") != 1 {
		t.Fatalf("backfill --where with a typo exited %d, want 1 with one error naming the column:\n%s", code, out)
	}
	if got := readCheckpoint(t, o.Dir); got != "" {
		t.Fatalf("checkpoint %s saved", got)
	}
	// A table without a primary key cannot be paged in a stable order: refused up front.
	w.exec("ALTER TABLE " + w.schema + ".outbox_event MODIFY id BIGINT NOT NULL, DROP PRIMARY KEY")
	code, out = runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event")
	if code != 1 || !strings.Contains(out, "has no primary key") || strings.Contains(out, "snapshot taken") {
		t.Fatalf("backfill of a table without a primary key exited %d, want 1 before any snapshot:\n%s", code, out)
	}
}
