package binlog

import (
	"context"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

func rowsOn(typ replication.EventType, pos uint32, schema, table string) *replication.BinlogEvent {
	return ev(typ, pos, &replication.RowsEvent{Table: &replication.TableMapEvent{Schema: []byte(schema), Table: []byte(table)}})
}

// A transaction whose rows are all in the checkpoint table is outboxd's own save; one that also
// touches any other table, a DDL, or one without a configured checkpoint table is not.
func TestAssemblerMarksOnlyCheckpointTransactions(t *testing.T) {
	gtidEv := func(seq uint64) *replication.BinlogEvent {
		return ev(replication.MARIADB_GTID_EVENT, 10, &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{ServerID: 1, SequenceNumber: seq}})
	}
	xid := ev(replication.XID_EVENT, 90, &replication.XIDEvent{})
	cases := []struct {
		name  string
		ck    TableRef
		rows  []*replication.BinlogEvent
		query string // a standalone statement instead of rows
		want  bool
	}{
		{"update of the checkpoint row", TableRef{"outboxd", "checkpoint"}, []*replication.BinlogEvent{rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "outboxd", "checkpoint")}, "", true},
		{"first insert of the row", TableRef{"outboxd", "checkpoint"}, []*replication.BinlogEvent{rowsOn(replication.WRITE_ROWS_EVENTv1, 50, "outboxd", "checkpoint")}, "", true},
		{"checkpoint and a business table", TableRef{"outboxd", "checkpoint"}, []*replication.BinlogEvent{
			rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "outboxd", "checkpoint"), rowsOn(replication.UPDATE_ROWS_EVENTv1, 60, "shop", "orders")}, "", false},
		{"a business table only", TableRef{"outboxd", "checkpoint"}, []*replication.BinlogEvent{rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "shop", "orders")}, "", false},
		{"same name in another schema", TableRef{"outboxd", "checkpoint"}, []*replication.BinlogEvent{rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "shop", "checkpoint")}, "", false},
		{"no checkpoint table configured", TableRef{}, []*replication.BinlogEvent{rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "outboxd", "checkpoint")}, "", false},
		{"an empty transaction", TableRef{"outboxd", "checkpoint"}, nil, "", false},
	}
	for _, c := range cases {
		a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.Nop(), CheckpointTable: c.ck,
			Tables: []TableSpec{{Schema: "shop", Table: "outbox"}}})
		ctx := context.Background()
		var got *Txn
		for _, e := range append(append([]*replication.BinlogEvent{gtidEv(1)}, c.rows...), xid) {
			txn, err := a.Handle(ctx, e)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if txn != nil {
				got = txn
			}
		}
		if got == nil || got.OnlyCheckpoint != c.want {
			t.Errorf("%s: txn %+v, want OnlyCheckpoint %v", c.name, got, c.want)
		}
		// The mark never leaks into the next transaction.
		a.Handle(ctx, gtidEv(2))
		a.Handle(ctx, rowsOn(replication.UPDATE_ROWS_EVENTv1, 50, "shop", "orders"))
		if next, _ := a.Handle(ctx, xid); next == nil || next.OnlyCheckpoint {
			t.Errorf("%s: the next transaction is marked: %+v", c.name, next)
		}
	}
}
