package binlog

import (
	"context"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

// xaPrepareBody builds an XA_PREPARE_LOG_EVENT body as MariaDB 10.11 wrote it for XA PREPARE 'x1'
// (observed: 00 01000000 02000000 00000000 7831).
func xaPrepareBody(onePhase bool, x XID) []byte {
	b := make([]byte, 13, 13+len(x.Gtrid)+len(x.Bqual))
	if onePhase {
		b[0] = 1
	}
	binary.LittleEndian.PutUint32(b[1:], uint32(int32(x.FormatID)))
	binary.LittleEndian.PutUint32(b[5:], uint32(len(x.Gtrid)))
	binary.LittleEndian.PutUint32(b[9:], uint32(len(x.Bqual)))
	return append(append(b, x.Gtrid...), x.Bqual...)
}

func xaPrepareEv(pos uint32, onePhase bool, x XID) *replication.BinlogEvent {
	return ev(replication.XA_PREPARE_LOG_EVENT, pos, &replication.GenericEvent{Data: xaPrepareBody(onePhase, x)})
}

func outboxRows(n int) *replication.BinlogEvent { return tableRows("shop", "outbox", n) }

// tableRows is an INSERT of n rows (event_id, biz_key) into schema.table.
func tableRows(schema, table string, n int) *replication.BinlogEvent {
	tm := &replication.TableMapEvent{Schema: []byte(schema), Table: []byte(table), ColumnCount: 2,
		ColumnName: [][]byte{[]byte("event_id"), []byte("biz_key")}, ColumnType: []byte{mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR}}
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{"e" + string(rune('a'+i)), "k"}
	}
	return insertRows(tm, rows)
}

// insertRows is a WRITE_ROWS event of rows into tm's table.
func insertRows(tm *replication.TableMapEvent, rows [][]any) *replication.BinlogEvent {
	re := &replication.RowsEvent{Table: tm, Rows: rows}
	// RowsEvent.Type reads an unexported field that only go-mysql's parser sets.
	f := reflect.ValueOf(re).Elem().FieldByName("eventType")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(replication.WRITE_ROWS_EVENTv2))
	return ev(replication.WRITE_ROWS_EVENTv2, 0, re)
}

func mariaGTID(pos uint32, seq uint64, flags byte) *replication.BinlogEvent {
	return ev(replication.MARIADB_GTID_EVENT, pos, &replication.MariadbGTIDEvent{
		GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}, Flags: flags})
}

func query(pos uint32, q string) *replication.BinlogEvent {
	return ev(replication.QUERY_EVENT, pos, &replication.QueryEvent{Query: []byte(q)})
}

type xaWant struct {
	gtid    string
	events  int
	partial bool
	op      XAOp // 0: Txn.XA is nil
	xid     XID
}

func runXA(t *testing.T, a *Assembler, evs []*replication.BinlogEvent) []xaWant {
	t.Helper()
	var got []xaWant
	for i, e := range evs {
		txn, err := a.Handle(context.Background(), e)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if txn == nil {
			continue
		}
		w := xaWant{gtid: txn.GTID, events: len(txn.Events), partial: txn.Partial}
		if txn.XA != nil {
			w.op, w.xid = txn.XA.Op, txn.XA.XID
		}
		got = append(got, w)
	}
	return got
}

func checkXA(t *testing.T, got, want []xaWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d transactions %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("txn %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// MariaDB 10.11's layout, as SHOW BINLOG EVENTS printed it: the prepared group is a GTID flagged
// FL_PREPARED_XA (shown as "XA START X'7831',X”,1 GTID 0-1-4"), rows, "XA END", XA_prepare; the
// commit is a standalone GTID and one query, here after an ordinary transaction.
func TestAssemblerMariaDBXA(t *testing.T) {
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Tables: []TableSpec{{Schema: "shop", Table: "outbox"}}})
	x1 := XID{FormatID: 1, Gtrid: "x1"}
	x3 := XID{FormatID: 3, Gtrid: "\x01\x02"}
	got := runXA(t, a, []*replication.BinlogEvent{
		mariaGTID(100, 4, 0x4c), outboxRows(2), query(200, "XA END X'7831',X'',1"), xaPrepareEv(300, false, x1),
		mariaGTID(400, 5, 0x0c), outboxRows(1), ev(replication.XID_EVENT, 500, &replication.XIDEvent{}),
		mariaGTID(600, 6, 0x4c), outboxRows(1), query(700, "XA END X'0102',X'',3"), xaPrepareEv(800, false, x3),
		mariaGTID(900, 7, 0x8d), query(1000, "XA COMMIT X'7831',X'',1"),
		mariaGTID(1100, 8, 0x8d), query(1200, "XA ROLLBACK X'0102',X'',3"),
	})
	checkXA(t, got, []xaWant{
		{gtid: "0-1-4", events: 2, op: XAPrepare, xid: x1},
		{gtid: "0-1-5", events: 1},
		{gtid: "0-1-6", events: 1, op: XAPrepare, xid: x3},
		{gtid: "0-1-7", op: XACommit, xid: x1},
		{gtid: "0-1-8", op: XARollback, xid: x3},
	})
}

// MySQL 8's layout (from sql/xa.cc and libbinlogevents; no fixture exists): GTID, Query
// XA START, rows, Query XA END, XA_prepare (one_phase 0); XA COMMIT as GTID + Query; a one-phase
// XA COMMIT as one group ending in an XA_prepare with one_phase set.
func TestAssemblerMySQLXA(t *testing.T) {
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MySQL, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Tables: []TableSpec{{Schema: "shop", Table: "outbox"}}, PieceEvents: 2})
	sid := uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	g := func(pos uint32, gno int64) *replication.BinlogEvent {
		return ev(replication.GTID_EVENT, pos, &replication.GTIDEvent{SID: sid[:], GNO: gno})
	}
	jta := XID{FormatID: 4660, Gtrid: "gtrid-1", Bqual: "b\x00q"}
	op := XID{FormatID: 1, Gtrid: "op"}
	got := runXA(t, a, []*replication.BinlogEvent{
		g(100, 1), query(110, "XA START X'67747269642d31',X'620071',4660"), outboxRows(3), query(120, "XA END X'67747269642d31',X'620071',4660"),
		xaPrepareEv(130, false, jta),
		g(200, 2), query(210, "XA START X'6f70',X'',1"), outboxRows(1), query(220, "XA END X'6f70',X'',1"), xaPrepareEv(230, true, op),
		g(300, 3), query(310, "BEGIN"), outboxRows(1), ev(replication.XID_EVENT, 320, &replication.XIDEvent{}),
		g(400, 4), query(410, "XA COMMIT X'67747269642d31',X'620071',4660"),
	})
	u := sid.String()
	checkXA(t, got, []xaWant{
		{gtid: u + ":1", events: 3, partial: true, op: XAPending}, // a piece before the outcome is known
		{gtid: u + ":1", events: 0, op: XAPrepare, xid: jta},
		{gtid: u + ":2", events: 1, op: XAOnePhase, xid: op},
		{gtid: u + ":3", events: 1},
		{gtid: u + ":4", op: XACommit, xid: jta},
	})
}

func TestParseXIDText(t *testing.T) {
	cases := []struct {
		in   string
		want XID
		tail string
	}{
		{" 'x1'", XID{FormatID: 1, Gtrid: "x1"}, ""},
		{" X'7831',X'',1", XID{FormatID: 1, Gtrid: "x1"}, ""},
		{"\t'x2' , 'bq' , 7 ONE PHASE", XID{FormatID: 7, Gtrid: "x2", Bqual: "bq"}, " ONE PHASE"},
		{` "it's",'a''b\'c\\d\n'`, XID{FormatID: 1, Gtrid: "it's", Bqual: "a'b'c\\d\n"}, ""},
		{" x'0102',X'',3", XID{FormatID: 3, Gtrid: "\x01\x02"}, ""},
		{" 0x7831,0x1,0x10", XID{FormatID: 16, Gtrid: "x1", Bqual: "\x01"}, ""},
		{" B'0111100000110001',b''", XID{FormatID: 1, Gtrid: "x1", Bqual: ""}, ""},
		{" 0b0111100000110001", XID{FormatID: 1, Gtrid: "x1"}, ""},
		{"'x','',4294967295", XID{FormatID: -1, Gtrid: "x"}, ""},
	}
	for _, c := range cases {
		got, tail, err := parseXIDText(c.in)
		if err != nil || got != c.want || tail != c.tail {
			t.Errorf("parseXIDText(%q) = %+v, %q, %v; want %+v, %q", c.in, got, tail, err, c.want, c.tail)
		}
	}
	for _, bad := range []string{"", " ", " x1", " 'unterminated", " X'0g'", " 'a',", " 'a','b',", " 'a','b',z", " '" + strings.Repeat("a", 65) + "'"} {
		if x, _, err := parseXIDText(bad); err == nil {
			t.Errorf("parseXIDText(%q) = %+v, want an error", bad, x)
		}
	}
}

// The xid of the XA_PREPARE_LOG_EVENT and the one in the XA COMMIT text must compare equal for
// every form a client may have used.
func TestXIDPrepareAndCommitMatch(t *testing.T) {
	for _, x := range []XID{{FormatID: 1, Gtrid: "x1"}, {FormatID: 7, Gtrid: "g", Bqual: "b"},
		{FormatID: 0, Gtrid: "\x00\xff", Bqual: strings.Repeat("q", 64)}} {
		_, fromEvent, err := parsePrepareRoundTrip(x)
		if err != nil {
			t.Fatal(err)
		}
		fromText, _, err := parseXIDText(" " + x.String())
		if err != nil || fromText != fromEvent || fromEvent != x {
			t.Errorf("xid %+v: event %+v, text %q -> %+v (%v)", x, fromEvent, x.String(), fromText, err)
		}
	}
	if s := (XID{FormatID: 1, Gtrid: "x1"}).String(); s != "'x1'" {
		t.Errorf("String = %s", s)
	}
	if s := (XID{FormatID: 3, Gtrid: "\x01\x02"}).String(); s != "X'0102','',3" {
		t.Errorf("String = %s", s)
	}
}

func parsePrepareRoundTrip(x XID) (bool, XID, error) { return parseXAPrepare(xaPrepareBody(false, x)) }

func TestXAMalformed(t *testing.T) {
	if _, _, err := parseXAPrepare([]byte{0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 'a'}); err == nil {
		t.Error("a gtrid longer than the body was accepted")
	}
	if _, _, err := parseXAPrepare([]byte{0, 1}); err == nil {
		t.Error("a short body was accepted")
	}
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Tables: []TableSpec{{Schema: "shop", Table: "outbox"}}})
	ctx := context.Background()
	if _, err := a.Handle(ctx, xaPrepareEv(10, false, XID{FormatID: 1, Gtrid: "x"})); err == nil || !strings.Contains(err.Error(), "'x'") {
		t.Errorf("XA_prepare outside a transaction: %v", err)
	}
	if _, err := a.Handle(ctx, mariaGTID(20, 9, 0x8d)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Handle(ctx, query(30, "XA COMMIT X'zz'"))
	if err == nil || !strings.Contains(err.Error(), "XA COMMIT") || !strings.Contains(err.Error(), "xid") {
		t.Errorf("unreadable xid: %v", err)
	}
}
