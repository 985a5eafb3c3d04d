package binlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

// fixturesDir finds shared/fixtures/mysql-binlogs by walking up from the test's working
// directory (it lives next to the repository), or takes $OUTBOXD_FIXTURES.
func fixturesDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("OUTBOXD_FIXTURES"); d != "" {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
		missingFixtures(t, "OUTBOXD_FIXTURES="+d+" is not a directory")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		cand := filepath.Join(dir, "shared", "fixtures", "mysql-binlogs")
		if fi, err := os.Stat(cand); err == nil && fi.IsDir() {
			return cand
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	missingFixtures(t, "no shared/fixtures/mysql-binlogs above "+wd)
	return ""
}

func missingFixtures(t *testing.T, why string) {
	t.Helper()
	msg := "MySQL binlog fixtures not found (" + why + "); set OUTBOXD_FIXTURES to the mysql-binlogs directory"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// staticColumns is a ColumnResolver for files written with MINIMAL row metadata; it counts
// calls so tests can see the cache at work.
type staticColumns struct {
	cols  map[string][]string
	calls map[string]int
}

func (s *staticColumns) Definitions(_ context.Context, schema, table string) ([]Column, error) {
	k := schema + "." + table
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[k]++
	c, ok := s.cols[k]
	if !ok {
		return nil, fmt.Errorf("no such table %s", k)
	}
	cols := make([]Column, len(c))
	for i, n := range c {
		cols[i] = Column{Name: n} // no DATA_TYPE: types are not compared
	}
	return cols, nil
}

// readFixture returns the file's events after the magic, with the FORMAT_DESCRIPTION's
// LOG_EVENT_BINLOG_IN_USE_F cleared: MySQL computes that event's CRC with the flag clear, so
// every CRC32 then verifies (see PROVENANCE.txt).
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixturesDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\xfebin")) || len(data) < 4+19 {
		t.Fatalf("%s: not a binlog file", name)
	}
	const fdeFlags = 4 + 17 // magic + header offset of the 2-byte flags
	data[fdeFlags] &^= 0x01
	return data[4:]
}

// parseFixture feeds every event of a fixture file through an Assembler configured like the
// live Reader's parser (JSON as MySQL text, row decoding only for outbox tables, CRC checked).
func parseFixture(t *testing.T, name string, cfg AssemblerConfig) []*Txn {
	t.Helper()
	txns, err := parseFixtureErr(t, name, cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return txns
}

func parseFixtureErr(t *testing.T, name string, cfg AssemblerConfig) ([]*Txn, error) {
	t.Helper()
	if cfg.Flavor == "" {
		cfg.Flavor = gtid.MySQL
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	asm := NewAssembler(cfg)
	p := replication.NewBinlogParser()
	p.SetFlavor("mysql")
	p.SetVerifyChecksum(true)
	p.SetRenderJSONAsMySQLText(true)
	p.SetRowsEventDecodeFunc(asm.Filter().DecodeRows)
	var txns []*Txn
	err := p.ParseReader(bytes.NewReader(readFixture(t, name)), func(ev *replication.BinlogEvent) error {
		txn, err := asm.Handle(context.Background(), ev)
		if txn != nil {
			txns = append(txns, txn)
		}
		return err
	})
	return txns, err
}

func spec(schema, table string, c ColumnNames) TableSpec {
	return TableSpec{Schema: schema, Table: table, Columns: c}
}

func str(f Field) string {
	switch {
	case f.Missing:
		return "<missing>"
	case f.Null:
		return "<null>"
	}
	return string(f.Bytes)
}

func wantGTIDs(t *testing.T, txns []*Txn, want ...string) {
	t.Helper()
	var got []string
	for _, x := range txns {
		got = append(got, x.GTID)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("GTIDs = %q, want %q", got, want)
	}
}

func wantEventCounts(t *testing.T, txns []*Txn, want ...int) {
	t.Helper()
	var got []int
	for _, x := range txns {
		got = append(got, len(x.Events))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events per txn = %v, want %v", got, want)
	}
}

func wantField(t *testing.T, what string, f Field, want string) {
	t.Helper()
	if got := str(f); got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// Every fixture parses to EOF through the Assembler with no outbox table configured, with
// strictly increasing end positions (each transaction ends past the previous one).
func TestFixturesAllParse(t *testing.T) {
	dir := fixturesDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.binlog"))
	if err != nil || len(files) < 15 {
		t.Fatalf("want the 15 fixture files in %s, got %d (%v)", dir, len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			txns := parseFixture(t, filepath.Base(f), AssemblerConfig{})
			var last uint32
			for _, x := range txns {
				if x.Pos <= last {
					t.Errorf("txn %q ends at %d, not after %d", x.GTID, x.Pos, last)
				}
				last = x.Pos
				if len(x.Events) != 0 {
					t.Errorf("txn %q has events with no outbox table configured", x.GTID)
				}
			}
		})
	}
}

func TestFixtureMySQL80CompressedJSON(t *testing.T) {
	res := &staticColumns{cols: map[string][]string{
		"a.test_table_3": {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9",
			"c10", "c11", "c12", "c13", "c14", "c15", "c16", "c17", "c18", "c19"},
		"a.b": {"id"},
	}}
	txns := parseFixture(t, "mysql80_gtid_compressed_json.binlog", AssemblerConfig{
		Tables: []TableSpec{
			spec("a", "test_table_3", ColumnNames{EventID: "c0", Key: "c1", Topic: "c4", Payload: "c9", EventType: "nope"}),
			spec("a", "b", ColumnNames{Payload: "id"}),
		},
		Columns: res,
	})
	const src = "76f3e7be-6720-11ed-9cad-0242ac110002"
	wantGTIDs(t, txns, src+":11", src+":12", src+":13")
	// :11 is the CREATE TABLE, :12 the compressed INSERT into a.b, :13 an UPDATE (ignored)
	// and an INSERT into a.test_table_3, both inside one TRANSACTION_PAYLOAD.
	wantEventCounts(t, txns, 0, 1, 1)
	if txns[0].Pos != 378 || txns[1].Pos != 651 || txns[2].Pos != 1283 {
		t.Errorf("end positions = %d,%d,%d; want the DDL's 378 and the payload events' 651, 1283",
			txns[0].Pos, txns[1].Pos, txns[2].Pos)
	}
	// MySQL 8 immediate_commit_timestamp: microseconds, same second as the header.
	if got, want := txns[2].CommitTime, time.UnixMicro(1668952413513328).UTC(); !got.Equal(want) {
		t.Errorf("commit time = %s, want %s", got, want)
	}
	for i, x := range txns {
		if !x.CommitTimePrecise {
			t.Errorf("txn %d: MySQL 8 commit time not marked precise", i)
		}
	}
	e := txns[2].Events[0]
	if e.Schema != "a" || e.Table != "test_table_3" || e.ID != "" {
		t.Errorf("event table/id = %s.%s %q", e.Schema, e.Table, e.ID)
	}
	wantField(t, "event_id", e.EventID, "6666")
	wantField(t, "key", e.Key, "product_item_value_2")
	wantField(t, "topic (BLOB)", e.Topic, "description_1")
	wantField(t, "payload (JSON)", e.Payload, `{"c": 1}`)
	wantField(t, "event_type", e.EventType, "<missing>")
	wantField(t, "headers", e.Headers, "<missing>")
	b := txns[1].Events[0]
	if b.ID != "1" || str(b.Payload) != "1" {
		t.Errorf("a.b row: id %q payload %q, want 1", b.ID, str(b.Payload))
	}
	if res.calls["a.test_table_3"] != 1 || res.calls["a.b"] != 1 {
		t.Errorf("resolver calls = %v, want one per table", res.calls)
	}
}

func TestFixtureMySQL96TaggedGTID(t *testing.T) {
	txns := parseFixture(t, "mysql96_tagged_gtid.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("test", "orders", ColumnNames{EventID: "id", Key: "qty", Payload: "amount"})},
		Columns: &staticColumns{cols: map[string][]string{"test.orders": {"id", "qty", "amount"}}},
	})
	wantGTIDs(t, txns, "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3")
	wantEventCounts(t, txns, 1)
	e := txns[0].Events[0]
	wantField(t, "id", e.EventID, "3")
	wantField(t, "qty", e.Key, "100")
	wantField(t, "amount (DECIMAL)", e.Payload, "250.00")
	if txns[0].Pos != 541 || txns[0].CommitTime.Unix() != 1770368687 || txns[0].CommitTime.Nanosecond() == 0 || !txns[0].CommitTimePrecise {
		t.Errorf("pos %d commit %s", txns[0].Pos, txns[0].CommitTime)
	}
}

func TestFixtureMySQL57MyFlash192Rows(t *testing.T) {
	res := &staticColumns{cols: map[string][]string{"test.testFlashback": {"id", "v"}}}
	txns := parseFixture(t, "mysql57_gtid_rows_myflash.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("test", "testFlashback", ColumnNames{Payload: "v"})},
		Columns: res,
	})
	const src = "efca80c9-323b-11e7-b857-00505622f032"
	var want []string
	for n := 126; n <= 132; n++ {
		want = append(want, fmt.Sprintf("%s:%d", src, n))
	}
	wantGTIDs(t, txns, want...)
	wantEventCounts(t, txns, 1, 5, 6, 12, 24, 48, 96) // 192 rows
	// 5.7 has no immediate_commit_timestamp: whole seconds from the header.
	if got := txns[0].CommitTime; !got.Equal(time.Unix(1506741702, 0)) {
		t.Errorf("5.7 commit time = %s", got)
	}
	for i, x := range txns {
		if x.CommitTimePrecise {
			t.Errorf("txn %d: 5.7's whole-second commit time marked precise", i)
		}
	}
	last := txns[6].Events[95]
	if last.ID != "218" || txns[6].Events[0].ID != "123" {
		t.Errorf("last txn ids %q..%q, want 123..218", txns[6].Events[0].ID, last.ID)
	}
	wantField(t, "event_id", last.EventID, "<missing>")
	if res.calls["test.testFlashback"] != 1 {
		t.Errorf("resolver calls = %v, want 1 (cached)", res.calls)
	}
}

func TestFixtureMySQL57RowsDeletesDDLEmoji(t *testing.T) {
	res := &staticColumns{cols: map[string][]string{"a.b": {"id"}, "a.emoji": {"id", "value"}}}
	txns := parseFixture(t, "mysql57_gtid_rows.binlog", AssemblerConfig{
		Tables: []TableSpec{
			spec("a", "b", ColumnNames{Payload: "id"}),
			spec("a", "emoji", ColumnNames{Payload: "value"}),
		},
		Columns: res,
	})
	const src = "58cf6502-63db-11ed-8079-0242ac110002"
	var want []string
	for n := 53; n <= 62; n++ {
		want = append(want, fmt.Sprintf("%s:%d", src, n))
	}
	wantGTIDs(t, txns, want...)
	// :53,:54 DELETE (ignored); :55,:56 INSERT; :57–:61 DDL; :62 INSERT into a.emoji.
	wantEventCounts(t, txns, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1)
	wantField(t, "a.b payload", txns[2].Events[0].Payload, "12")
	e := txns[9].Events[0]
	if e.Table != "emoji" || e.ID != "2" {
		t.Errorf("emoji row %s id %q", e.Table, e.ID)
	}
	// The row's VARCHAR has a zero length prefix: an empty string, not NULL.
	if e.Payload.Null || e.Payload.Missing || len(e.Payload.Bytes) != 0 || e.Payload.Bytes == nil {
		t.Errorf("emoji value = %+v, want empty non-NULL", e.Payload)
	}
	// "create table bbba" / "DROP TABLE `aaa`" must not invalidate a.b's cached names.
	if res.calls["a.b"] != 1 {
		t.Errorf("a.b resolved %d times, want 1", res.calls["a.b"])
	}
}

func TestFixtureMySQL90JSONOpaque(t *testing.T) {
	// FULL metadata: column names come from the TABLE_MAP; no resolver configured.
	txns := parseFixture(t, "mysql90_json_opaque_anon.binlog", AssemblerConfig{
		Tables: []TableSpec{spec("foo", "test", ColumnNames{Payload: "a"})},
	})
	wantGTIDs(t, txns, "", "", "")
	wantEventCounts(t, txns, 0, 0, 8)
	want := []string{
		`{"a": "base64:type15:VQ=="}`, // opaque of an unknown type, as mysqld prints it
		`{"b": "2012-03-18"}`,
		`{"c": "2012-03-18 11:30:45.000000"}`,
		`{"c": "87:31:46.654321"}`,
		`{"d": 123.456}`, // opaque DECIMAL: unquoted
		`{"e": 9.00}`,
		`{"e": [0, 1, true, false]}`,
		`{"e": null}`,
	}
	for i, w := range want {
		wantField(t, fmt.Sprintf("row %d", i), txns[2].Events[i].Payload, w)
	}
	if got, want := txns[2].CommitTime, time.UnixMicro(1727775144596369).UTC(); !got.Equal(want) {
		t.Errorf("commit time = %s, want %s", got, want)
	}
}

func TestFixtureMySQL80PartialJSONIgnored(t *testing.T) {
	txns := parseFixture(t, "mysql80_json_partial_update_anon.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("mysql", "t", ColumnNames{Payload: "json_col", Key: "name"})},
		Columns: &staticColumns{cols: map[string][]string{"mysql.t": {"id", "json_col", "name", "age"}}},
	})
	// ALTER USER, CREATE TABLE, 4 INSERT txns (1,1,1,3 rows), UPDATE, PARTIAL_UPDATE.
	wantEventCounts(t, txns, 0, 0, 1, 1, 1, 3, 0, 0)
	e := txns[2].Events[0]
	wantField(t, "json", e.Payload, `{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}`)
	wantField(t, "generated name", e.Key, "Joe")
	if txns[5].Events[2].ID != "6" {
		t.Errorf("id = %q", txns[5].Events[2].ID)
	}
}

func TestFixtureMySQL80CompressedAnon(t *testing.T) {
	txns := parseFixture(t, "mysql80_compressed_insert_anon.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("test", "tb1", ColumnNames{Payload: "id"})},
		Columns: &staticColumns{cols: map[string][]string{"test.tb1": {"id"}}},
	})
	wantGTIDs(t, txns, "")
	wantEventCounts(t, txns, 1)
	if txns[0].Events[0].ID != "1" || txns[0].Pos != 431 {
		t.Errorf("id %q pos %d", txns[0].Events[0].ID, txns[0].Pos)
	}
	upd := parseFixture(t, "mysql80_compressed_update_anon.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("demo", "movies", ColumnNames{})},
		Columns: &staticColumns{}, // never consulted: UPDATE rows are not decoded
	})
	wantEventCounts(t, upd, 0)
}

func TestFixtureMySQL80MinimalMetadata(t *testing.T) {
	tables := []TableSpec{spec("noria", "t1", ColumnNames{})}
	// The server ran with binlog_row_image=MINIMAL: the after-image bitmap is 0x15, so columns
	// 1 and 3 are not in the row at all. Their values are lost to the binlog: outboxd stops,
	// naming them (by the names the resolver gives) and the setting to change.
	_, err := parseFixtureErr(t, "mysql80_minimal_metadata_anon.binlog", AssemblerConfig{
		Tables: tables,
		Columns: &staticColumns{cols: map[string][]string{
			"noria.t1": {"id", "payload", "topic", "event_type", "headers"}}},
	})
	if err == nil || !strings.Contains(err.Error(), "outbox table noria.t1") ||
		!strings.Contains(err.Error(), "lacks column(s) payload, event_type") || !strings.Contains(FixOf(err), "binlog_row_image=FULL") {
		t.Errorf("partial row image: err = %v", err)
	}

	// No resolver: a clear error naming the setting to change.
	if _, err := parseFixtureErr(t, "mysql80_minimal_metadata_anon.binlog", AssemblerConfig{Tables: tables}); err == nil ||
		!errors.Is(err, errNoColumnNames) || !strings.Contains(FixOf(err), "binlog_row_metadata=FULL") {
		t.Errorf("no resolver: err = %v", err)
	}
	// The table has a different column count now than the row: refuse to guess.
	_, err = parseFixtureErr(t, "mysql80_minimal_metadata_anon.binlog", AssemblerConfig{
		Tables:  tables,
		Columns: &staticColumns{cols: map[string][]string{"noria.t1": {"id", "payload"}}},
	})
	if err == nil || !strings.Contains(err.Error(), "has 5 columns but the table now has 2") || !strings.Contains(FixOf(err), "binlog_row_metadata=FULL") {
		t.Errorf("count mismatch: err = %v", err)
	}
}

func TestFixtureMySQL80Decimals(t *testing.T) {
	cols := []string{"L_ORDERKEY", "L_PARTKEY", "L_SUPPKEY", "L_LINENUMBER", "L_QUANTITY", "L_EXTENDEDPRICE",
		"L_DISCOUNT", "L_TAX", "L_RETURNFLAG", "L_LINESTATUS", "L_SHIPDATE", "L_COMMITDATE", "L_RECEIPTDATE",
		"L_SHIPINSTRUCT", "L_SHIPMODE", "L_COMMENT"}
	m := ColumnNames{EventID: "L_QUANTITY", Key: "L_ORDERKEY", Topic: "L_LINESTATUS", Payload: "L_COMMENT", EventType: "L_SHIPDATE"}
	res := &staticColumns{cols: map[string][]string{"test.LINEITEM": cols, "test.Demo": cols}}
	txns := parseFixture(t, "mysql80_anon_rows_decimal.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("test", "LINEITEM", m), spec("test", "Demo", m)},
		Columns: res,
	})
	// DDL, INSERT 1, INSERT 5, UPDATE, DELETE, DELETE, 3 DDL on Demo, DROP, INSERT 5 into Demo.
	wantEventCounts(t, txns, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 5)
	e := txns[2].Events[2]
	wantField(t, "decimal(12,3)", e.EventID, "99.999")
	wantField(t, "bigint", e.Key, "12345678909878")
	wantField(t, "date", e.EventType, "1990-08-01")
	if !strings.HasPrefix(str(e.Payload), "使用箭头标记 -> 不是 SQL 语句的一部分") {
		t.Errorf("CJK varchar = %q", str(e.Payload))
	}
	d := txns[10].Events[0]
	wantField(t, "nullable varchar", d.Topic, "<null>")
	wantField(t, "nullable comment", d.Payload, "<null>")
	wantField(t, "decimal", d.EventID, "99.998")
	wantField(t, "topic row 2", txns[10].Events[1].Topic, "Y")
	if res.calls["test.LINEITEM"] != 1 || res.calls["test.Demo"] != 1 {
		t.Errorf("resolver calls %v", res.calls)
	}
}

func TestFixtureMySQL80FullMetadata(t *testing.T) {
	inv := parseFixture(t, "mysql80_gtid_fullmeta_invisible_cols.binlog", AssemblerConfig{
		Tables: []TableSpec{spec("mysql", "t1", ColumnNames{EventID: "f1", Key: "f3", Topic: "f4", Payload: "f5", Headers: "f6"})},
	})
	const src = "97c7af02-4c50-11ec-acd8-681842034964"
	wantGTIDs(t, inv, src+":1", src+":2", src+":3", src+":4", src+":5")
	wantEventCounts(t, inv, 0, 0, 1, 1, 0)
	e := inv[2].Events[0]
	wantField(t, "int unsigned", e.EventID, "1")
	wantField(t, "int", e.Key, "-3")
	wantField(t, "text", e.Topic, "4")
	if !bytes.Equal(e.Payload.Bytes, []byte{5}) {
		t.Errorf("blob = %v", e.Payload.Bytes)
	}
	wantField(t, "bigint unsigned", e.Headers, "6000000000")
	wantField(t, "event_type", e.EventType, "<missing>")
	wantField(t, "null int", inv[3].Events[0].EventID, "<null>")

	enum := parseFixture(t, "mysql80_gtid_fullmeta_enum_set.binlog", AssemblerConfig{
		Tables: []TableSpec{spec("mysql", "t", ColumnNames{Key: "f1", EventType: "f3", Headers: "f4", Payload: "f5"})},
	})
	wantEventCounts(t, enum, 0, 0, 1, 0, 0)
	e = enum[2].Events[0]
	wantField(t, "enum (label from FULL metadata)", e.EventType, "var1")
	wantField(t, "set (bitmask)", e.Headers, "5")
	wantField(t, "text", e.Payload, "0123456789")
	if len(e.Key.Bytes) != 100 {
		t.Errorf("char(128) len = %d", len(e.Key.Bytes))
	}

	bit := parseFixture(t, "mysql80_gtid_fullmeta_bit.binlog", AssemblerConfig{
		Tables: []TableSpec{spec("mysql", "foo", ColumnNames{EventID: "a", Payload: "b", Key: "c"})},
	})
	wantEventCounts(t, bit, 0, 0, 1)
	e = bit[2].Events[0]
	wantField(t, "bit(3)", e.EventID, "4")
	wantField(t, "text", e.Payload, "foo")
	wantField(t, "bit(8)", e.Key, "32")
}

func TestFixturePercona57(t *testing.T) {
	txns := parseFixture(t, "mysql57_percona_gtid_rows.binlog", AssemblerConfig{
		Tables:  []TableSpec{spec("bltest", "foo", ColumnNames{EventID: "val_decimal", Payload: "comment"})},
		Columns: &staticColumns{cols: map[string][]string{"bltest.foo": {"id", "val_decimal", "comment"}}},
	})
	const src = "87cee3a4-6b31-11e7-bdfd-0d98d6698870"
	wantGTIDs(t, txns, src+":14917", src+":14918", src+":14919")
	wantEventCounts(t, txns, 0, 1, 1)
	wantField(t, "decimal(10,5)", txns[1].Events[0].EventID, "0.10000")
	wantField(t, "comment", txns[2].Events[0].Payload, "one point zero")
	if txns[2].Events[0].ID != "2" {
		t.Errorf("id %q", txns[2].Events[0].ID)
	}
}

func TestFixturePreviousGTIDsOnly(t *testing.T) {
	if txns := parseFixture(t, "mysql80_previous_gtids_only.binlog", AssemblerConfig{}); len(txns) != 0 {
		t.Fatalf("got %d txns from a file without transactions", len(txns))
	}
}

// The filter must leave other tables' and non-INSERT rows undecoded (the speed win) while
// decoding outbox INSERTs.
func TestFilterSkipsRowDecoding(t *testing.T) {
	f := NewTableFilter([]TableSpec{spec("test", "testFlashback", ColumnNames{})})
	p := replication.NewBinlogParser()
	p.SetRowsEventDecodeFunc(f.DecodeRows)
	var decoded, skipped int
	err := p.ParseReader(bytes.NewReader(readFixture(t, "mysql57_gtid_rows.binlog")), func(ev *replication.BinlogEvent) error {
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			if re.Table == nil || re.ColumnCount == 0 {
				return fmt.Errorf("header not decoded")
			}
			if re.Rows != nil {
				decoded++
			} else {
				skipped++
			}
		}
		return nil
	})
	if err != nil || decoded != 0 || skipped != 5 {
		t.Fatalf("other tables: decoded %d skipped %d err %v", decoded, skipped, err)
	}
	p = replication.NewBinlogParser()
	p.SetRowsEventDecodeFunc(f.DecodeRows)
	rows := 0
	err = p.ParseReader(bytes.NewReader(readFixture(t, "mysql57_gtid_rows_myflash.binlog")), func(ev *replication.BinlogEvent) error {
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			rows += len(re.Rows)
		}
		return nil
	})
	if err != nil || rows != 192 {
		t.Fatalf("outbox table: %d rows, err %v", rows, err)
	}
}

// A transaction with more rows than PieceEvents comes out in pieces: every piece but the last
// is Partial and carries the same GTID, the last one carries the position, and the events
// concatenated are exactly the unsplit transaction's.
func TestLargeTransactionsComeOutInPieces(t *testing.T) {
	cfg := func(piece int) AssemblerConfig {
		return AssemblerConfig{
			Tables:      []TableSpec{spec("test", "testFlashback", ColumnNames{Payload: "v"})},
			Columns:     &staticColumns{cols: map[string][]string{"test.testFlashback": {"id", "v"}}},
			PieceEvents: piece,
		}
	}
	whole := parseFixture(t, "mysql57_gtid_rows_myflash.binlog", cfg(-1))
	pieces := parseFixture(t, "mysql57_gtid_rows_myflash.binlog", cfg(10))
	var joined []*Txn
	var open *Txn
	for _, p := range pieces {
		if open == nil {
			open = &Txn{GTID: p.GTID, CommitTime: p.CommitTime}
		}
		if p.GTID != open.GTID {
			t.Fatalf("piece of %s interleaved with %s", p.GTID, open.GTID)
		}
		if p.Partial && (p.File != "" || p.Pos != 0) {
			t.Fatalf("partial piece of %s carries a position %s:%d", p.GTID, p.File, p.Pos)
		}
		open.Events = append(open.Events, p.Events...)
		if !p.Partial {
			open.File, open.Pos = p.File, p.Pos
			joined = append(joined, open)
			open = nil
		}
	}
	if len(pieces) <= len(whole) {
		t.Fatalf("%d pieces for %d transactions: nothing was split", len(pieces), len(whole))
	}
	if len(joined) != len(whole) {
		t.Fatalf("%d transactions from pieces, want %d", len(joined), len(whole))
	}
	for i := range whole {
		w, j := whole[i], joined[i]
		if w.GTID != j.GTID || w.Pos != j.Pos || w.File != j.File || len(w.Events) != len(j.Events) {
			t.Fatalf("txn %d: %s %s:%d %d events, pieces give %s %s:%d %d events",
				i, w.GTID, w.File, w.Pos, len(w.Events), j.GTID, j.File, j.Pos, len(j.Events))
		}
		for k := range w.Events {
			if w.Events[k].ID != j.Events[k].ID || str(w.Events[k].Payload) != str(j.Events[k].Payload) {
				t.Fatalf("txn %d event %d differs", i, k)
			}
		}
	}
}
