package binlog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/gtid"
)

// col is an information_schema row: DATA_TYPE, COLUMN_TYPE, CHARACTER_OCTET_LENGTH,
// NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION (-1 for NULL).
func col(dataType, columnType string, octets, prec, scale, frac int64) Column {
	return Column{Name: "c", DataType: dataType, ColumnType: columnType, OctetLength: octets, Precision: prec, Scale: scale, FracDigits: frac}
}

// The TABLE_MAP types and metadata are those MariaDB 10.11 wrote for a table with these
// columns (utf8mb4), and MySQL 8's where it differs; each information_schema row must fit its
// own binlog column and not the others.
func TestTypeFits(t *testing.T) {
	type binlogCol struct {
		typ  byte
		meta uint16
	}
	cases := []struct {
		is   Column
		fits []binlogCol
		not  []binlogCol
	}{
		{col("bigint", "bigint(20)", -1, 19, 0, -1), []binlogCol{{mysql.MYSQL_TYPE_LONGLONG, 0}},
			[]binlogCol{{mysql.MYSQL_TYPE_LONG, 0}, {mysql.MYSQL_TYPE_VARCHAR, 256}}},
		{col("int", "int(10) unsigned", -1, 10, 0, -1), []binlogCol{{mysql.MYSQL_TYPE_LONG, 0}}, []binlogCol{{mysql.MYSQL_TYPE_LONGLONG, 0}}},
		{col("tinyint", "tinyint(1)", -1, 3, 0, -1), []binlogCol{{mysql.MYSQL_TYPE_TINY, 0}}, []binlogCol{{mysql.MYSQL_TYPE_SHORT, 0}}},
		{col("float", "float", -1, 12, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_FLOAT, 4}}, []binlogCol{{mysql.MYSQL_TYPE_DOUBLE, 8}}},
		{col("decimal", "decimal(10,2)", -1, 10, 2, -1), []binlogCol{{mysql.MYSQL_TYPE_NEWDECIMAL, 0x0a02}},
			[]binlogCol{{mysql.MYSQL_TYPE_NEWDECIMAL, 0x0c02}, {mysql.MYSQL_TYPE_DOUBLE, 8}}},
		{col("bit", "bit(3)", -1, 3, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BIT, 3}}, []binlogCol{{mysql.MYSQL_TYPE_BIT, 0x0100}}},
		{col("bit", "bit(12)", -1, 12, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BIT, 0x0104}}, nil},
		{col("year", "year(4)", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_YEAR, 0}}, []binlogCol{{mysql.MYSQL_TYPE_SHORT, 0}}},
		{col("date", "date", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_DATE, 0}}, []binlogCol{{mysql.MYSQL_TYPE_DATETIME2, 0}}},
		// MariaDB 10.11 writes the MySQL 5.6 temporal types (mysql56_temporal_format); tables
		// from older servers keep the old ones.
		{col("datetime", "datetime", -1, -1, -1, 0), []binlogCol{{mysql.MYSQL_TYPE_DATETIME2, 0}, {mysql.MYSQL_TYPE_DATETIME, 0}},
			[]binlogCol{{mysql.MYSQL_TYPE_DATETIME2, 6}, {mysql.MYSQL_TYPE_TIMESTAMP2, 0}}},
		{col("datetime", "datetime(6)", -1, -1, -1, 6), []binlogCol{{mysql.MYSQL_TYPE_DATETIME2, 6}}, []binlogCol{{mysql.MYSQL_TYPE_DATETIME2, 3}}},
		{col("timestamp", "timestamp", -1, -1, -1, 0), []binlogCol{{mysql.MYSQL_TYPE_TIMESTAMP2, 0}, {mysql.MYSQL_TYPE_TIMESTAMP, 0}}, nil},
		{col("time", "time", -1, -1, -1, 0), []binlogCol{{mysql.MYSQL_TYPE_TIME2, 0}, {mysql.MYSQL_TYPE_TIME, 0}}, nil},
		// VARCHAR: the metadata is the maximum length in bytes, never the old VAR_STRING length
		// of another column.
		{col("varchar", "varchar(64)", 256, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_VARCHAR, 256}, {mysql.MYSQL_TYPE_VAR_STRING, 256}},
			[]binlogCol{{mysql.MYSQL_TYPE_VARCHAR, 512}, {mysql.MYSQL_TYPE_STRING, 0xfe00 | 0xff}, {mysql.MYSQL_TYPE_BLOB, 2}}},
		{col("varbinary", "varbinary(64)", 64, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_VARCHAR, 64}}, nil},
		// CHAR/BINARY: STRING with real type 254; a CHAR over 255 bytes keeps its high length
		// bits in the real-type byte (CHAR(100) utf8mb4 = 400 bytes = 0xee90).
		{col("char", "char(10)", 40, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe28}},
			[]binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe10}, {mysql.MYSQL_TYPE_STRING, 0xf701}, {mysql.MYSQL_TYPE_VARCHAR, 40}}},
		{col("char", "char(100)", 400, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xee90}}, []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe90}}},
		{col("binary", "binary(4)", 4, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe04}}, nil},
		{col("uuid", "uuid", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe10}}, []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xf701}}},
		{col("inet6", "inet6", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xfe10}}, nil},
		// ENUM and SET are STRING with the real type in the metadata's first byte.
		{col("enum", "enum('a','b')", 4, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xf701}},
			[]binlogCol{{mysql.MYSQL_TYPE_STRING, 0xf801}, {mysql.MYSQL_TYPE_STRING, 0xfe04}}},
		{col("set", "set('x','y')", 12, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xf801}}, []binlogCol{{mysql.MYSQL_TYPE_STRING, 0xf701}}},
		// BLOB/TEXT: one binlog type, the metadata is the number of length bytes.
		{col("tinytext", "tinytext", 255, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 1}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 2}}},
		{col("blob", "blob", 65535, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 2}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}}},
		{col("text", "text", 65535, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 2}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 3}}},
		{col("mediumtext", "mediumtext", 16777215, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 3}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}}},
		{col("longblob", "longblob", 4294967295, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}},
			[]binlogCol{{mysql.MYSQL_TYPE_BLOB, 2}, {mysql.MYSQL_TYPE_VARCHAR, 256}}},
		// MariaDB's JSON is LONGTEXT, in information_schema as in the binlog.
		{col("longtext", "longtext", 4294967295, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}}, []binlogCol{{mysql.MYSQL_TYPE_JSON, 4}}},
		// MySQL's JSON is binary.
		{col("json", "json", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_JSON, 4}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}}},
		{col("point", "point", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_GEOMETRY, 4}}, []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}}},
		// Unknown to outboxd, or not described: nothing to compare.
		{col("someday_type", "someday_type", -1, -1, -1, -1), []binlogCol{{mysql.MYSQL_TYPE_BLOB, 4}, {mysql.MYSQL_TYPE_LONG, 0}}, nil},
		{Column{Name: "c"}, []binlogCol{{mysql.MYSQL_TYPE_LONG, 0}}, nil},
	}
	for _, c := range cases {
		for _, b := range c.fits {
			if !typeFits(c.is, b.typ, b.meta) {
				t.Errorf("%s does not fit %s (type %d meta %#x)", c.is.ColumnType, binlogTypeName(b.typ, b.meta), b.typ, b.meta)
			}
		}
		for _, b := range c.not {
			if typeFits(c.is, b.typ, b.meta) {
				t.Errorf("%s fits %s (type %d meta %#x)", c.is.ColumnType, binlogTypeName(b.typ, b.meta), b.typ, b.meta)
			}
		}
	}
}

type defsResolver struct {
	defs  [][]Column // one answer per call; the last repeats
	calls int
}

func (d *defsResolver) Definitions(context.Context, string, string) ([]Column, error) {
	r := d.defs[min(d.calls, len(d.defs)-1)]
	d.calls++
	return r, nil
}

// With MINIMAL metadata each TABLE_MAP's types are checked against information_schema's: a
// row from before an ALTER that moved a column stops with the column named; a stale cached
// definition is read again once before that is an error.
func TestColumnNamesCheckTypes(t *testing.T) {
	spec := TableSpec{Schema: "shop", Table: "outbox_event"}
	idCol := col("bigint", "bigint(20)", -1, 19, 0, -1)
	idCol.Name = "id"
	eventID := col("varchar", "varchar(64)", 256, -1, -1, -1)
	eventID.Name = "event_id"
	payload := col("longblob", "longblob", 4294967295, -1, -1, -1)
	payload.Name = "payload"
	before := []Column{idCol, eventID, payload}
	after := []Column{idCol, payload, eventID} // MODIFY payload ... AFTER id
	tm := &replication.TableMapEvent{Schema: []byte("shop"), Table: []byte("outbox_event"), ColumnCount: 3,
		ColumnType: []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB},
		ColumnMeta: []uint16{0, 256, 4}}

	newAsm := func(res ColumnResolver) (*Assembler, *tableState) {
		a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Tables: []TableSpec{spec}, Columns: res})
		a.cur = &Txn{GTID: "0-1-9"}
		return a, a.tables[tableKey{"shop", "outbox_event"}]
	}

	res := &defsResolver{defs: [][]Column{before}}
	a, st := newAsm(res)
	names, err := a.columnNames(context.Background(), st, tm)
	if err != nil || strings.Join(names, ",") != "id,event_id,payload" {
		t.Fatalf("fitting definition: %v, %v", names, err)
	}
	if _, err := a.columnNames(context.Background(), st, tm); err != nil || res.calls != 1 {
		t.Fatalf("cached: %v, %d resolver calls", err, res.calls)
	}

	res = &defsResolver{defs: [][]Column{after}}
	a, st = newAsm(res)
	_, err = a.columnNames(context.Background(), st, tm)
	for _, want := range []string{"outbox table shop.outbox_event", "transaction 0-1-9", "column 2 is VARCHAR/VARBINARY of 256 bytes",
		"`payload` longblob", "did not checkpoint it"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("moved column: err = %v, want %q", err, want)
		}
	}
	var se *StopError
	if !errors.As(err, &se) || se.GTID != "0-1-9" || se.Table != "shop.outbox_event" || se.Setting != "binlog_row_metadata" ||
		!strings.Contains(se.Fix, "binlog_row_metadata=FULL") || strings.Contains(err.Error(), se.Fix) {
		t.Errorf("moved column: err = %#v, want a StopError with the fix apart from the message", err)
	}

	// Cached from before an ALTER that the stream's DDL did not announce: read again, fits.
	res = &defsResolver{defs: [][]Column{after, before}}
	a, st = newAsm(res)
	st.cols, st.names = after, []string{"id", "payload", "event_id"}
	res.calls = 1
	names, err = a.columnNames(context.Background(), st, tm)
	if err != nil || strings.Join(names, ",") != "id,event_id,payload" || res.calls != 2 {
		t.Errorf("stale cache: %v, %v, %d calls", names, err, res.calls)
	}
}
