package binlog

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

// BenchmarkAssemble is the assembler's share of a catch-up: a GTID, the INSERTs (one row, or
// two of 50 rows) into the suggested outbox table (id BIGINT, event_id, biz_key, topic, payload
// TEXT of 1 KiB) with FULL row metadata, and the XID, decoded rows as go-mysql hands them over.
// go test ./binlog -run '^$' -bench Assemble -benchmem
func BenchmarkAssemble(b *testing.B) {
	cols := []string{"id", "event_id", "biz_key", "topic", "payload"}
	tm := &replication.TableMapEvent{Schema: []byte("shop"), Table: []byte("outbox_event"), ColumnCount: uint64(len(cols)),
		ColumnType: []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB}}
	for _, c := range cols {
		tm.ColumnName = append(tm.ColumnName, []byte(c))
	}
	payload := string(make([]byte, 1024))
	rowsEv := func(from, n int) *replication.BinlogEvent {
		rows := make([][]any, n)
		for i := range rows {
			k := from + i
			rows[i] = []any{int64(1_000_000 + k), fmt.Sprintf("ev-%d", k), fmt.Sprintf("key-%d", k%10000), "orders", payload}
		}
		return insertRows(tm, rows)
	}
	xid := ev(replication.XID_EVENT, 500, &replication.XIDEvent{})
	for _, c := range []struct {
		name string
		evs  []*replication.BinlogEvent
	}{
		{"txn=1", []*replication.BinlogEvent{mariaGTID(100, 1, 0x0c), rowsEv(0, 1), xid}},
		{"txn=100", []*replication.BinlogEvent{mariaGTID(100, 1, 0x0c), rowsEv(0, 50), rowsEv(50, 50), xid}},
	} {
		b.Run(c.name, func(b *testing.B) {
			a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.Nop(), Tables: []TableSpec{{Schema: "shop", Table: "outbox_event"}}})
			ctx := context.Background()
			events := 0
			b.ReportAllocs()
			for b.Loop() {
				// Every transaction has its own TABLE_MAP event, so go-mysql's per-map caches
				// (ColumnNameString) start empty: one allocation here, the same before and after.
				fresh := *tm
				for _, e := range c.evs {
					if re, ok := e.Event.(*replication.RowsEvent); ok {
						re.Table = &fresh
					}
					txn, err := a.Handle(ctx, e)
					if err != nil {
						b.Fatal(err)
					}
					if txn != nil {
						events += len(txn.Events)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
