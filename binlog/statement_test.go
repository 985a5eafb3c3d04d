package binlog

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

func TestDMLTargets(t *testing.T) {
	cases := []struct {
		q    string
		want string // verb and targets, "" for none
	}{
		{"INSERT INTO outbox_event (event_id) VALUES ('a')", "INSERT [.outbox_event]"},
		{"insert low_priority ignore into `shop`.`outbox_event` values (1)", "INSERT [shop.outbox_event]"},
		{"INSERT outbox_event SET event_id='x'", "INSERT [.outbox_event]"},
		{"INSERT /*! IGNORE */ INTO shop . outbox_event VALUES (1)", "INSERT [shop.outbox_event]"},
		{"/* app */ REPLACE INTO \"outbox_event\" VALUES (1)", "REPLACE [.outbox_event]"},
		{"INSERT INTO orders SELECT * FROM outbox_event", "INSERT [.orders]"},
		{"INSERT INTO orders (note) VALUES ('INSERT INTO outbox_event')", "INSERT [.orders]"},
		{"INSERT INTO `we``ird` VALUES (1)", "INSERT [.we`ird]"},
		{"LOAD DATA INFILE '../../tmp/SQL_LOAD-1-2-3.data' INTO TABLE `outbox_event` FIELDS TERMINATED BY ','", "LOAD DATA [.outbox_event]"},
		{"LOAD DATA LOCAL INFILE 'INTO TABLE x' REPLACE INTO TABLE shop.outbox_event", "LOAD DATA [shop.outbox_event]"},
		{"UPDATE outbox_event SET topic='x' WHERE id=1", "UPDATE [.outbox_event]"},
		{"UPDATE orders o JOIN shop.outbox_event e ON o.id = e.id SET o.note = 'x'", "UPDATE [.orders .o .JOIN shop.outbox_event .e .ON o.id e.id]"},
		{"UPDATE orders SET note = (SELECT 1 FROM outbox_event)", "UPDATE [.orders]"},
		{"DELETE FROM outbox_event WHERE created_at < NOW()", "DELETE [.FROM .outbox_event]"},
		{"DELETE QUICK o FROM shop.outbox_event o WHERE o.id IN (SELECT id FROM x)", "DELETE [.o .FROM shop.outbox_event .o]"},
		{"WITH old AS (SELECT id FROM outbox_event) DELETE FROM orders WHERE id IN (SELECT id FROM old)", "DELETE [.FROM .orders]"},
		{"BEGIN", ""},
		{"COMMIT", ""},
		{"ALTER TABLE outbox_event ADD COLUMN x INT", ""},
		{"SELECT * FROM outbox_event", ""},
		{"XA START 'x'", ""},
		{"", ""},
		{"# comment only\n", ""},
		{"-- c\nINSERT INTO outbox_event VALUES (1)", "INSERT [.outbox_event]"},
		// The server takes "--" and any blank or control character as a comment, and the
		// binlog keeps it (MariaDB 10.11: "use `shop`; --\tc2\nINSERT INTO outbox_event ...").
		{"--\tc\nINSERT INTO outbox_event VALUES (1)", "INSERT [.outbox_event]"},
		{"--\nINSERT INTO outbox_event VALUES (1)", "INSERT [.outbox_event]"},
		{"INSERT INTO orders (note) VALUES (5--1)", "INSERT [.orders]"},
		// MariaDB's per-statement variables, logged as written.
		{"SET STATEMENT sql_mode='' FOR INSERT INTO outbox_event (event_id) VALUES ('a')", "INSERT [.outbox_event]"},
		{"set statement max_statement_time=1, sql_mode=(SELECT 'FOR') for replace into shop.outbox_event values (1)", "REPLACE [shop.outbox_event]"},
		{"SET STATEMENT sql_mode='' FOR DELETE FROM outbox_event", "DELETE [.FROM .outbox_event]"},
		{"SET @x = 'FOR INSERT INTO outbox_event'", ""},
		{"SET STATEMENT sql_mode=''", ""},
		{"SAVEPOINT outbox_event", ""},
		{"XA COMMIT 'outbox_event'", ""},
		{"/* INSERT INTO outbox_event */ SELECT 1", ""},
	}
	for _, c := range cases {
		verb, targets := dmlTargets(c.q)
		got := ""
		if verb != "" {
			var ts []string
			for _, t := range targets {
				ts = append(ts, t.schema+"."+t.table)
			}
			got = verb + " " + fmt.Sprint(ts)
		}
		if got != c.want {
			t.Errorf("dmlTargets(%q) = %q, want %q", c.q, got, c.want)
		}
	}
}

// A statement-logged write to an outbox table stops the Assembler inside its transaction (which
// is therefore never completed, let alone checkpointed); the transactions before it come out.
func TestAssemblerStatementLoggedDML(t *testing.T) {
	mariaGTID := func(seq uint64) *replication.BinlogEvent {
		return ev(replication.MARIADB_GTID_EVENT, 0, &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}})
	}
	query := func(schema, q string) *replication.BinlogEvent {
		return ev(replication.QUERY_EVENT, 0, &replication.QueryEvent{Schema: []byte(schema), Query: []byte(q)})
	}
	xid := ev(replication.XID_EVENT, 0, &replication.XIDEvent{})
	cases := []struct {
		name    string
		events  []*replication.BinlogEvent
		wantErr string // "" when the stream is fine
	}{
		{"INSERT in the default schema", []*replication.BinlogEvent{mariaGTID(7),
			query("shop", "INSERT INTO outbox_event (event_id) VALUES ('stmt')"), xid},
			"outbox table shop.outbox_event: transaction 0-1-7 writes it with a statement-logged INSERT"},
		{"qualified, other default schema, case differs", []*replication.BinlogEvent{mariaGTID(7),
			query("other", "insert into SHOP.Outbox_Event values (1)"), xid}, "statement-logged INSERT"},
		{"DELETE", []*replication.BinlogEvent{mariaGTID(7),
			query("shop", "DELETE FROM outbox_event WHERE id < 10"), xid}, "statement-logged DELETE"},
		{"same name in another schema", []*replication.BinlogEvent{mariaGTID(7),
			query("other", "INSERT INTO outbox_event VALUES (1)"), xid}, ""},
		// A table beside the outbox may have a trigger that writes it (or be a view over it):
		// the binlog would hold only this statement.
		{"business table in the outbox schema", []*replication.BinlogEvent{mariaGTID(7),
			query("shop", "INSERT INTO orders (note) VALUES ('outbox_event')"), xid}, "statement-logged INSERT into shop.orders in the outbox table's schema"},
		{"business table in another schema", []*replication.BinlogEvent{mariaGTID(7),
			query("other", "INSERT INTO orders (note) VALUES ('outbox_event')"), xid}, ""},
		// A SELECT is logged only when a stored function it called wrote data.
		{"stored function", []*replication.BinlogEvent{mariaGTID(7),
			query("other", "SELECT `shop`.`f`()"), xid}, "statement-logged SELECT calling a stored function"},
		{"stored function in another schema", []*replication.BinlogEvent{mariaGTID(7),
			query("other", "SELECT `billing`.`f`()"), xid}, ""},
		{"DDL", []*replication.BinlogEvent{ev(replication.MARIADB_GTID_EVENT, 0, &replication.MariadbGTIDEvent{
			GTID: mysql.MariadbGTID{SequenceNumber: 7}, Flags: replication.BINLOG_MARIADB_FL_STANDALONE}),
			query("shop", "ALTER TABLE outbox_event ADD COLUMN x INT")}, ""},
	}
	for _, c := range cases {
		a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.New(zerolog.NewTestWriter(t)),
			Tables: []TableSpec{{Schema: "shop", Table: "outbox_event"}}})
		// A complete transaction first: it must still come out.
		first, _ := a.Handle(context.Background(), mariaGTID(6))
		if first == nil {
			first, _ = a.Handle(context.Background(), xid)
		}
		if first == nil || first.GTID != "0-1-6" {
			t.Fatalf("%s: the transaction before did not complete: %+v", c.name, first)
		}
		var err error
		var done []*Txn
		for _, e := range c.events {
			var txn *Txn
			if txn, err = a.Handle(context.Background(), e); err != nil {
				break
			}
			if txn != nil {
				done = append(done, txn)
			}
		}
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) ||
			!strings.Contains(FixOf(err), "binlog_format=ROW") || !strings.Contains(FixOf(err), "SET SESSION binlog_format")):
			t.Errorf("%s: err = %v, want %q naming binlog_format=ROW and the session setting", c.name, err, c.wantErr)
		case c.wantErr != "" && len(done) > 0:
			t.Errorf("%s: the transaction with the statement completed: %+v", c.name, done)
		}
	}
}

// EXECUTE_LOAD_QUERY as MariaDB 10.11 wrote it for a statement-logged LOAD DATA (header, post
// header, status vars, schema, statement, CRC32).
func TestExecuteLoadQuery(t *testing.T) {
	raw := []byte("V\x8c\x0ek\x12\x01\x00\x00\x00\x16\x01\x00\x00\xc1\x14\x00\x00\x00\x00" +
		"\x06\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00&\x00\x01\x00\x00\x00\t\x00\x00\x00(\x00\x00\x00\x00" +
		"\x00\x00\x00\x00\x01\x01\x00\x00 T\x00\x00\x00\x00\x06\x03std\x04-\x00-\x00\xe0\x00\x05\x06SYSTEM\x80=\xd2\a" +
		"shop\x00LOAD DATA INFILE '/tmp/probe/x.csv' INTO TABLE `outbox_event` FIELDS TERMINATED BY ',' ENCLOSED BY '' " +
		"ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' (`event_id`, `biz_key`, `topic`, `payload`)\xaa\xd2\a\xa7")
	db, q, ok := executeLoadQuery(raw)
	if !ok || db != "shop" || !strings.HasPrefix(q, "LOAD DATA INFILE '/tmp/probe/x.csv' INTO TABLE `outbox_event`") {
		t.Fatalf("executeLoadQuery = %q, %q, %v", db, q, ok)
	}
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Tables: []TableSpec{{Schema: "shop", Table: "outbox_event"}}})
	_, err := a.Handle(context.Background(), &replication.BinlogEvent{RawData: raw,
		Header: &replication.EventHeader{EventType: replication.EXECUTE_LOAD_QUERY_EVENT}, Event: &replication.ExecuteLoadQueryEvent{}})
	if err == nil || !strings.Contains(err.Error(), "statement-logged LOAD DATA") {
		t.Errorf("LOAD DATA into the outbox: %v", err)
	}
	if _, _, ok := executeLoadQuery(raw[:40]); ok {
		t.Error("a truncated event must not decode")
	}
}
