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

// BenchmarkAssemble is the assembler's share of a 100-row catch-up: a GTID, two 50-row INSERTs
// into the suggested outbox table (id BIGINT, event_id, biz_key, topic, payload TEXT of 1 KiB)
// and the XID, decoded rows as go-mysql hands them over. It reports allocations per event.
// go test ./binlog -run '^$' -bench Assemble -benchmem
func BenchmarkAssemble(b *testing.B) {
	cols := []string{"id", "event_id", "biz_key", "topic", "payload"}
	tm := &replication.TableMapEvent{Schema: []byte("shop"), Table: []byte("outbox_event"), ColumnCount: uint64(len(cols)),
		ColumnType: []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB}}
	for _, c := range cols {
		tm.ColumnName = append(tm.ColumnName, []byte(c))
	}
	payload := string(make([]byte, 1024))
	half := func(from int) *replication.BinlogEvent {
		rows := make([][]any, 50)
		for i := range rows {
			n := from + i
			rows[i] = []any{int64(1_000_000 + n), fmt.Sprintf("ev-%d", n), fmt.Sprintf("key-%d", n%10000), "orders", payload}
		}
		return insertRows(tm, rows)
	}
	evs := []*replication.BinlogEvent{mariaGTID(100, 1, 0x0c), half(0), half(50), ev(replication.XID_EVENT, 500, &replication.XIDEvent{})}
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.Nop(), Tables: []TableSpec{{Schema: "shop", Table: "outbox_event"}}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range evs {
			txn, err := a.Handle(ctx, e)
			if err != nil {
				b.Fatal(err)
			}
			if txn != nil && len(txn.Events) != 100 {
				b.Fatalf("%d events", len(txn.Events))
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/event")
}
