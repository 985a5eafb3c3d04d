package binlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

const (
	outboxDDL = `CREATE TABLE outbox_event (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		event_id VARCHAR(64) NOT NULL,
		biz_key VARCHAR(64) NOT NULL,
		topic VARCHAR(128) NOT NULL,
		payload LONGTEXT NOT NULL,
		event_type VARCHAR(64) NULL,
		headers JSON NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	outboxBinDDL = `CREATE TABLE outbox_bin (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		event_id VARCHAR(64) NOT NULL,
		biz_key VARBINARY(64) NOT NULL,
		topic VARCHAR(128) NOT NULL,
		payload LONGBLOB NOT NULL
	) ENGINE=InnoDB`
	ordersDDL = `CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(64)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
)

var liveTables = []TableSpec{{Schema: "shop", Table: "outbox_event"}, {Schema: "shop", Table: "outbox_bin"}}

// liveRun is one Reader.Run in the background.
type liveRun struct {
	out    chan *Txn
	done   chan error
	cancel context.CancelFunc
}

func startReader(t *testing.T, s *mariadb.Server, start gtid.Set, mutate func(*Config)) *liveRun {
	t.Helper()
	return startReaderDump(t, s, start, start, mutate)
}

// startReaderDump is startReader with dump sent to the server as its position instead of start,
// which still filters the stream: the server then streams transactions start covers.
func startReaderDump(t *testing.T, s *mariadb.Server, start, dump gtid.Set, mutate func(*Config)) *liveRun {
	t.Helper()
	cfg := Config{
		Flavor: gtid.MariaDB, Addr: s.Addr, User: "root", ServerID: 1001,
		Tables: liveTables, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
		HeartbeatPeriod: 500 * time.Millisecond, ReadTimeout: 1500 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := NewReader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	lr := &liveRun{out: make(chan *Txn), done: make(chan error, 1), cancel: cancel}
	go func() { lr.done <- r.run(ctx, start, dump, lr.out) }()
	t.Cleanup(func() { lr.stop(t) })
	return lr
}

// stop cancels Run and checks that it returned ctx's error (not some other failure).
func (lr *liveRun) stop(t *testing.T) {
	t.Helper()
	if lr.cancel == nil {
		return
	}
	lr.cancel()
	lr.cancel = nil
	select {
	case err := <-lr.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("Run did not return after cancel")
	}
}

func (lr *liveRun) recv(t *testing.T, n int) []*Txn {
	t.Helper()
	var got []*Txn
	timeout := time.After(15 * time.Second)
	for len(got) < n {
		select {
		case x := <-lr.out:
			got = append(got, x)
		case err := <-lr.done:
			t.Fatalf("Run returned %v after %d of %d txns", err, len(got), n)
		case <-timeout:
			t.Fatalf("timed out after %d of %d txns", len(got), n)
		}
	}
	return got
}

// expectNone checks that no further Txn arrives within d.
func (lr *liveRun) expectNone(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case x := <-lr.out:
		t.Fatalf("unexpected txn %q with %d events", x.GTID, len(x.Events))
	case err := <-lr.done:
		t.Fatalf("Run returned %v", err)
	case <-time.After(d):
	}
}

func pos(t *testing.T, db *sql.DB) gtid.Set {
	t.Helper()
	p, err := server.Position(t.Context(), db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// inTx runs f in one transaction and commits it (or rolls back when commit is false).
func inTx(t *testing.T, db *sql.DB, commit bool, f func(tx *sql.Tx) error) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func insertOutbox(tx *sql.Tx, eventID, key, topic, payload string, eventType, headers any) error {
	_, err := tx.Exec(`INSERT INTO outbox_event (event_id, biz_key, topic, payload, event_type, headers) VALUES (?,?,?,?,?,?)`,
		eventID, key, topic, payload, eventType, headers)
	return err
}

func TestLiveMariaDB(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	ctx := t.Context()
	db, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec(t, db, outboxDDL, outboxBinDDL, ordersDDL)
	start := pos(t, db)

	lr := startReader(t, s, start, nil)

	emoji := `{"msg":"héllo 🚀🎉","n":1}`
	cjk := "订单已创建：数据库日志 — 使用箭头标记"
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}

	var want []string // GTIDs in commit order, each as @@gtid_binlog_pos reports it
	record := func() { want = append(want, pos(t, db).String()) }

	before := time.Now().Add(-time.Second)
	// 1: several outbox rows plus a business row, both outbox tables.
	inTx(t, db, true, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO orders (note) VALUES ('o1')`); err != nil {
			return err
		}
		if err := insertOutbox(tx, "e1", "order-1", "orders", emoji, nil, `{"trace":"t-1","ü":"✓"}`); err != nil {
			return err
		}
		if err := insertOutbox(tx, "e2", "order-1", "orders", cjk, "created", nil); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO outbox_bin (event_id, biz_key, topic, payload) VALUES (?,?,?,?)`,
			"b1", []byte{0x00, 0xff, 0x80}, "bin", allBytes)
		return err
	})
	record()
	// Rolled back: nothing in the binlog.
	inTx(t, db, false, func(tx *sql.Tx) error {
		return insertOutbox(tx, "rolled-back", "k", "orders", "never", nil, nil)
	})
	// 2: UPDATE and 3: DELETE of outbox rows.
	exec(t, db, `UPDATE outbox_event SET topic = 'changed' WHERE event_id = 'e1'`)
	record()
	exec(t, db, `DELETE FROM outbox_event WHERE event_id = 'e2'`)
	record()
	// 4: a business table only. 5: DDL.
	exec(t, db, `INSERT INTO orders (note) VALUES ('o2')`)
	record()
	exec(t, db, `CREATE TABLE audit (id INT PRIMARY KEY)`)
	record()
	// 6: autocommit INSERT into the outbox.
	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('e3', 'order-2', 'orders', '{"a": [1, 2.50, "x"]}')`)
	record()
	after := time.Now().Add(time.Second)

	got := lr.recv(t, len(want))
	for i, x := range got {
		if x.GTID != want[i] {
			t.Errorf("txn %d GTID = %q, want %q (from @@gtid_binlog_pos)", i, x.GTID, want[i])
		}
		if x.CommitTime.Before(before) || x.CommitTime.After(after) {
			t.Errorf("txn %d commit time %s outside [%s, %s]", i, x.CommitTime, before, after)
		}
		if i > 0 && (x.File != got[i-1].File || x.Pos <= got[i-1].Pos) {
			t.Errorf("txn %d ends at %s:%d, not after %s:%d", i, x.File, x.Pos, got[i-1].File, got[i-1].Pos)
		}
	}
	// Consecutive sequence numbers in domain 0 from server 1.
	for i, g := range want {
		var d, srv, seq int
		if _, err := fmt.Sscanf(g, "%d-%d-%d", &d, &srv, &seq); err != nil || d != 0 || srv != 1 {
			t.Fatalf("GTID %q: %v", g, err)
		}
		if i > 0 {
			var pd, ps, pseq int
			fmt.Sscanf(want[i-1], "%d-%d-%d", &pd, &ps, &pseq)
			if seq != pseq+1 {
				t.Errorf("GTIDs not consecutive: %q after %q", g, want[i-1])
			}
		}
	}
	file, endPos, err := server.BinlogStatus(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if last := got[len(got)-1]; last.File != file || uint64(last.Pos) != endPos {
		t.Errorf("last txn ends at %s:%d, server is at %s:%d", last.File, last.Pos, file, endPos)
	}
	wantEventCounts(t, got, 3, 0, 0, 0, 0, 1)

	e1, e2, b1 := got[0].Events[0], got[0].Events[1], got[0].Events[2]
	if e1.Schema != "shop" || e1.Table != "outbox_event" || e1.ID != "1" || b1.Table != "outbox_bin" || b1.ID != "1" {
		t.Errorf("tables/ids: %s.%s %q, %s %q", e1.Schema, e1.Table, e1.ID, b1.Table, b1.ID)
	}
	wantField(t, "e1 event_id", e1.EventID, "e1")
	wantField(t, "e1 key", e1.Key, "order-1")
	wantField(t, "e1 topic", e1.Topic, "orders")
	wantField(t, "e1 payload (emoji)", e1.Payload, emoji)
	wantField(t, "e1 event_type", e1.EventType, "<null>")
	wantField(t, "e1 headers (MariaDB JSON is text as inserted)", e1.Headers, `{"trace":"t-1","ü":"✓"}`)
	wantField(t, "e2 payload (CJK)", e2.Payload, cjk)
	wantField(t, "e2 event_type", e2.EventType, "created")
	wantField(t, "e2 headers", e2.Headers, "<null>")
	if !bytes.Equal(b1.Payload.Bytes, allBytes) {
		t.Errorf("binary payload = %x, want all 256 byte values", b1.Payload.Bytes)
	}
	if !bytes.Equal(b1.Key.Bytes, []byte{0x00, 0xff, 0x80}) {
		t.Errorf("binary key = %x", b1.Key.Bytes)
	}
	wantField(t, "outbox_bin event_type", b1.EventType, "<missing>")
	wantField(t, "outbox_bin headers", b1.Headers, "<missing>")
	wantField(t, "e3 payload", got[5].Events[0].Payload, `{"a": [1, 2.50, "x"]}`)

	// Idle for longer than ReadTimeout: heartbeats must keep the stream alive.
	lr.expectNone(t, 2500*time.Millisecond)
	exec(t, db, `INSERT INTO orders (note) VALUES ('after idle')`)
	record()
	if x := lr.recv(t, 1)[0]; x.GTID != want[len(want)-1] {
		t.Errorf("after idle: %q, want %q", x.GTID, want[len(want)-1])
	}
	lr.stop(t)

	t.Run("session charset", func(t *testing.T) {
		// go-mysql's handshake collation (255) is unknown to MariaDB 10.11, which then falls
		// back to latin1; the Option hook must leave the session on utf8mb4.
		c, err := client.Connect(s.Addr, "root", "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := setConnCollation(c); err != nil {
			t.Fatal(err)
		}
		r, err := c.Execute("SELECT @@character_set_connection, @@character_set_results, @@collation_connection")
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := r.GetString(0, 0)
		res, _ := r.GetString(0, 1)
		coll, _ := r.GetString(0, 2)
		if cs != "utf8mb4" || res != "utf8mb4" || coll != connCollation {
			t.Errorf("session: charset %s results %s collation %s", cs, res, coll)
		}
	})

	t.Run("start mid-history", func(t *testing.T) {
		mid, err := gtid.Parse(gtid.MariaDB, want[2]) // after the DELETE
		if err != nil {
			t.Fatal(err)
		}
		r := startReader(t, s, mid, nil)
		rest := r.recv(t, len(want)-3)
		wantGTIDs(t, rest, want[3:]...)
		wantEventCounts(t, rest, 0, 0, 1, 0)
	})

	t.Run("GTID not on server", func(t *testing.T) {
		ahead, err := gtid.Parse(gtid.MariaDB, "0-1-99999")
		if err != nil {
			t.Fatal(err)
		}
		err = runUntilError(t, s, ahead, nil)
		if !errors.Is(err, ErrGTIDNotOnServer) || !strings.Contains(FixOf(err), "--from-gtid") ||
			!strings.Contains(FixOf(err), "start: latest") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("no REPLICATION SLAVE", func(t *testing.T) {
		exec(t, db, `CREATE USER 'norepl'@'%' IDENTIFIED BY 'pw'`, `GRANT SELECT ON shop.* TO 'norepl'@'%'`)
		err := runUntilError(t, s, start, func(c *Config) { c.User, c.Password = "norepl", "pw" })
		if !errors.Is(err, ErrAccessDenied) || !strings.Contains(FixOf(err), "REPLICATION SLAVE") {
			t.Errorf("err = %v", err)
		}
	})
}

// runUntilError runs a Reader that is expected to fail and returns its error.
func runUntilError(t *testing.T, s *mariadb.Server, start gtid.Set, mutate func(*Config)) error {
	t.Helper()
	cfg := Config{Flavor: gtid.MariaDB, Addr: s.Addr, User: "root", ServerID: 1002, Tables: liveTables,
		Logger: zerolog.New(zerolog.NewTestWriter(t))}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := NewReader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out := make(chan *Txn, 100)
	err = r.Run(ctx, start, out)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want a server error", err)
	}
	return err
}

// MINIMAL row metadata: names come from the ColumnResolver, and an ALTER TABLE that shifts the
// payload column mid-stream is picked up.
func TestLiveMariaDBMinimalMetadata(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	ctx := t.Context()
	db, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db, outboxDDL, outboxBinDDL)
	db.Close()
	if err := s.Restart(ctx, mariadb.Options{RowMetadata: "MINIMAL"}); err != nil {
		t.Fatal(err)
	}
	db, err = s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var meta string
	if err := db.QueryRowContext(ctx, "SELECT @@binlog_row_metadata").Scan(&meta); err != nil || meta != "MINIMAL" {
		t.Fatalf("binlog_row_metadata = %q, %v", meta, err)
	}
	start := pos(t, db)
	res := &countingResolver{inner: &server.ColumnReader{DB: db}}
	lr := startReader(t, s, start, func(c *Config) { c.Columns = res })

	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload, event_type) VALUES ('m1','k1','t1','p1','typ')`)
	first := lr.recv(t, 1)[0]
	wantEventCounts(t, []*Txn{first}, 1)
	e := first.Events[0]
	wantField(t, "event_id", e.EventID, "m1")
	wantField(t, "payload", e.Payload, "p1")
	wantField(t, "event_type", e.EventType, "typ")
	wantField(t, "headers", e.Headers, "<null>")

	// A new column before payload shifts payload's position by one. The Reader must be caught
	// up before each ALTER: with MINIMAL metadata the resolver can only read the table's
	// current definition (see the limitation in columnNames).
	exec(t, db, `ALTER TABLE outbox_event ADD COLUMN region VARCHAR(16) NOT NULL DEFAULT 'eu' AFTER topic`)
	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('m2','k2','t2','p2')`)
	got := lr.recv(t, 2)
	// Same column count, different order: only the DDL invalidation can catch this one.
	exec(t, db, `ALTER TABLE shop.outbox_event DROP COLUMN region, ADD COLUMN region2 VARCHAR(16) NOT NULL DEFAULT 'us' FIRST`)
	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('m3','k3','t3','p3')`)
	got = append(got, lr.recv(t, 2)...)
	wantEventCounts(t, got, 0, 1, 0, 1)
	wantField(t, "after ADD COLUMN: payload", got[1].Events[0].Payload, "p2")
	wantField(t, "after ADD COLUMN: topic", got[1].Events[0].Topic, "t2")
	wantField(t, "after reorder: payload", got[3].Events[0].Payload, "p3")
	wantField(t, "after reorder: event_id", got[3].Events[0].EventID, "m3")
	if got[3].Events[0].ID != "3" {
		t.Errorf("id = %q", got[3].Events[0].ID)
	}
	if n := res.calls(); n != 3 {
		t.Errorf("resolver called %d times, want 3 (initial + once per ALTER)", n)
	}
}

type countingResolver struct {
	inner ColumnResolver
	n     atomic.Int64
}

func (c *countingResolver) Definitions(ctx context.Context, schema, table string) ([]Column, error) {
	c.n.Add(1)
	return c.inner.Definitions(ctx, schema, table)
}

func (c *countingResolver) calls() int { return int(c.n.Load()) }
