package binlog

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/server"
)

// Column is one column of a table as information_schema.COLUMNS describes it now (the
// ColumnResolver's answer). Without FULL row metadata the TABLE_MAP carries only each column's
// binlog type and metadata and the names come from here by position; comparing the types is
// how a row written before an ALTER TABLE that moved or retyped columns is told from one that
// fits. A Column without DataType is not compared.
type Column = server.Column

// checkColumnTypes returns an error naming the first column whose binlog type (from tm) cannot
// be the type information_schema reports for the column at that position.
func (a *Assembler) checkColumnTypes(spec TableSpec, tm *replication.TableMapEvent, cols []Column) error {
	for i, c := range cols {
		if i >= len(tm.ColumnType) || i >= len(tm.ColumnMeta) {
			break
		}
		if typ, meta := tm.ColumnType[i], tm.ColumnMeta[i]; !typeFits(c, typ, meta) {
			return &StopError{
				Table: spec.Schema + "." + spec.Table, GTID: a.txnGTID(), Setting: "binlog_row_metadata",
				Problem: fmt.Sprintf("%s has a row whose column %d is %s in the binlog, but information_schema has %s %s there now: "+
					"the table was altered (columns moved or retyped) after the row was written, and with binlog_row_metadata=MINIMAL the row carries no column names, "+
					"so outboxd would map it onto the wrong columns; outboxd stopped before that transaction and did not checkpoint it",
					a.txnName(), i+1, binlogTypeName(typ, meta), sqlident.Quote(c.Name), c.ColumnType),
				Fix: "Set binlog_row_metadata=FULL where the server has it (MySQL 8.0+, MariaDB 10.5+). For the rows written before the ALTER: undo the ALTER until outboxd " +
					"has relayed them (it follows an ALTER it reads in the binlog), or start past them with --from-gtid",
			}
		}
	}
	return nil
}

// typeFits reports whether a column that information_schema describes as c is logged in a
// TABLE_MAP as typ with metadata meta, as MySQL 5.6+ and MariaDB 10.x write them. Lengths are
// compared where the metadata holds them (VARCHAR and CHAR bytes, BLOB/TEXT length bytes,
// DECIMAL precision and scale, fractional seconds, BIT width): a changed length is an ALTER
// after the row too. A DATA_TYPE it does not know fits anything.
func typeFits(c Column, typ byte, meta uint16) bool {
	known := func(v int64) bool { return v >= 0 }
	switch strings.ToLower(c.DataType) {
	case "":
		return true
	case "tinyint":
		return typ == mysql.MYSQL_TYPE_TINY
	case "smallint":
		return typ == mysql.MYSQL_TYPE_SHORT
	case "mediumint":
		return typ == mysql.MYSQL_TYPE_INT24
	case "int", "integer":
		return typ == mysql.MYSQL_TYPE_LONG
	case "bigint":
		return typ == mysql.MYSQL_TYPE_LONGLONG
	case "float":
		return typ == mysql.MYSQL_TYPE_FLOAT
	case "double", "real", "double precision":
		return typ == mysql.MYSQL_TYPE_DOUBLE
	case "decimal", "numeric", "fixed":
		return typ == mysql.MYSQL_TYPE_NEWDECIMAL &&
			(!known(c.Precision) || !known(c.Scale) || int64(meta>>8) == c.Precision && int64(meta&0xff) == c.Scale)
	case "bit":
		return typ == mysql.MYSQL_TYPE_BIT && (!known(c.Precision) || int64(meta>>8)*8+int64(meta&0xff) == c.Precision)
	case "year":
		return typ == mysql.MYSQL_TYPE_YEAR
	case "date":
		return typ == mysql.MYSQL_TYPE_DATE || typ == mysql.MYSQL_TYPE_NEWDATE
	case "time":
		return typ == mysql.MYSQL_TYPE_TIME || typ == mysql.MYSQL_TYPE_TIME2 && fracFits(c, meta)
	case "datetime":
		return typ == mysql.MYSQL_TYPE_DATETIME || typ == mysql.MYSQL_TYPE_DATETIME2 && fracFits(c, meta)
	case "timestamp":
		return typ == mysql.MYSQL_TYPE_TIMESTAMP || typ == mysql.MYSQL_TYPE_TIMESTAMP2 && fracFits(c, meta)
	case "char", "binary":
		rt, length := stringMeta(typ, meta)
		return rt == mysql.MYSQL_TYPE_STRING && (!known(c.OctetLength) || int64(length) == c.OctetLength)
	case "uuid", "inet4", "inet6": // MariaDB's fixed-size binary types
		rt, _ := stringMeta(typ, meta)
		return rt == mysql.MYSQL_TYPE_STRING
	case "enum":
		rt, _ := stringMeta(typ, meta)
		return rt == mysql.MYSQL_TYPE_ENUM
	case "set":
		rt, _ := stringMeta(typ, meta)
		return rt == mysql.MYSQL_TYPE_SET
	case "varchar", "varbinary":
		return (typ == mysql.MYSQL_TYPE_VARCHAR || typ == mysql.MYSQL_TYPE_VAR_STRING) &&
			(!known(c.OctetLength) || int64(meta) == c.OctetLength)
	case "tinyblob", "tinytext":
		return typ == mysql.MYSQL_TYPE_BLOB && meta == 1
	case "blob", "text":
		return typ == mysql.MYSQL_TYPE_BLOB && meta == 2
	case "mediumblob", "mediumtext":
		return typ == mysql.MYSQL_TYPE_BLOB && meta == 3
	case "longblob", "longtext": // also MariaDB's JSON, whose DATA_TYPE is longtext
		return typ == mysql.MYSQL_TYPE_BLOB && meta == 4
	case "json": // MySQL's binary JSON
		return typ == mysql.MYSQL_TYPE_JSON
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
		"geometrycollection", "geomcollection":
		return typ == mysql.MYSQL_TYPE_GEOMETRY
	case "vector":
		return typ == mysql.MYSQL_TYPE_VECTOR
	}
	return true
}

func fracFits(c Column, meta uint16) bool { return c.FracDigits < 0 || int64(meta) == c.FracDigits }

// stringMeta decodes a MYSQL_TYPE_STRING column's metadata: the real type (STRING for CHAR
// and BINARY, ENUM, SET) and the byte length, whose two high bits a CHAR over 255 bytes stores
// inverted in the real type's byte (sql/field.cc, Field_string::save_field_metadata).
func stringMeta(typ byte, meta uint16) (realType byte, length uint16) {
	switch typ {
	case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET:
		return typ, meta & 0xff
	case mysql.MYSQL_TYPE_STRING:
	default:
		return 0, 0
	}
	b0, b1 := byte(meta>>8), meta&0xff
	if b0 == 0 { // old servers: no real type
		return mysql.MYSQL_TYPE_STRING, b1
	}
	if b0&0x30 != 0x30 {
		return b0 | 0x30, b1 | uint16((b0&0x30)^0x30)<<4
	}
	return b0, b1
}

// binlogTypeName describes a TABLE_MAP column type for messages.
func binlogTypeName(typ byte, meta uint16) string {
	switch typ {
	case mysql.MYSQL_TYPE_TINY:
		return "TINYINT"
	case mysql.MYSQL_TYPE_SHORT:
		return "SMALLINT"
	case mysql.MYSQL_TYPE_INT24:
		return "MEDIUMINT"
	case mysql.MYSQL_TYPE_LONG:
		return "INT"
	case mysql.MYSQL_TYPE_LONGLONG:
		return "BIGINT"
	case mysql.MYSQL_TYPE_FLOAT:
		return "FLOAT"
	case mysql.MYSQL_TYPE_DOUBLE:
		return "DOUBLE"
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		return fmt.Sprintf("DECIMAL(%d,%d)", meta>>8, meta&0xff)
	case mysql.MYSQL_TYPE_BIT:
		return fmt.Sprintf("BIT(%d)", (meta>>8)*8+meta&0xff)
	case mysql.MYSQL_TYPE_YEAR:
		return "YEAR"
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE:
		return "DATE"
	case mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2:
		return fmt.Sprintf("TIME(%d)", meta)
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2:
		return fmt.Sprintf("DATETIME(%d)", meta)
	case mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2:
		return fmt.Sprintf("TIMESTAMP(%d)", meta)
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		return fmt.Sprintf("VARCHAR/VARBINARY of %d bytes", meta)
	case mysql.MYSQL_TYPE_BLOB:
		if name, ok := map[uint16]string{1: "TINY", 2: "", 3: "MEDIUM", 4: "LONG"}[meta]; ok {
			return name + "BLOB/" + name + "TEXT"
		}
		return fmt.Sprintf("BLOB/TEXT with %d length bytes", meta)
	case mysql.MYSQL_TYPE_JSON:
		return "JSON"
	case mysql.MYSQL_TYPE_GEOMETRY:
		return "GEOMETRY"
	case mysql.MYSQL_TYPE_VECTOR:
		return "VECTOR"
	case mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET:
		switch rt, length := stringMeta(typ, meta); rt {
		case mysql.MYSQL_TYPE_ENUM:
			return "ENUM"
		case mysql.MYSQL_TYPE_SET:
			return "SET"
		default:
			return fmt.Sprintf("CHAR/BINARY of %d bytes", length)
		}
	}
	return fmt.Sprintf("binlog type %d", typ)
}
