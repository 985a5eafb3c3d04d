package binlog

import (
	"reflect"
	"testing"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

func TestPrimaryKeySlices(t *testing.T) {
	pks := make([]any, 0, 4)
	k1, pks := primaryKey(pks, []uint64{2, 0}, []any{int64(1), "x", "k1"})
	k2, pks := primaryKey(pks, []uint64{2, 0}, []any{int64(2), "y", "k2"})
	if !reflect.DeepEqual(k1, []any{"k1", int64(1)}) || !reflect.DeepEqual(k2, []any{"k2", int64(2)}) || len(pks) != 4 {
		t.Fatalf("keys %v %v, backing %v", k1, k2, pks)
	}
	if _ = append(k1, "grown"); k2[0] != "k2" {
		t.Fatal("appending to one key overwrote the next: a key must have its own capacity")
	}
	if k, rest := primaryKey(pks, []uint64{5}, []any{int64(1)}); k != nil || len(rest) != 4 {
		t.Fatalf("a key column past the row: %v %v", k, rest)
	}
}

// The primary key comes from the TABLE_MAP (MariaDB writes it with binlog_row_metadata=FULL),
// whatever its columns are called and however many there are, in key order.
func TestLivePrimaryKey(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	ctx := t.Context()
	db, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec(t, db, `CREATE TABLE outbox_event (
		seq BIGINT AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL, biz_key VARCHAR(64), topic VARCHAR(64),
		payload TEXT, region VARCHAR(8) NOT NULL, PRIMARY KEY (region, seq), KEY (seq))`,
		`CREATE TABLE outbox_bin (id BIGINT PRIMARY KEY, event_id VARCHAR(64), biz_key VARCHAR(64), topic VARCHAR(64), payload TEXT)`)
	start := pos(t, db)
	lr := startReader(t, s, start, func(c *Config) {
		c.Tables = []TableSpec{{Schema: "shop", Table: "outbox_event", PrimaryKey: true}, {Schema: "shop", Table: "outbox_bin"}}
	})
	exec(t, db, `INSERT INTO outbox_event (event_id, biz_key, topic, payload, region) VALUES ('e1','k','t','p','eu'), ('e2','k','t','p','us')`,
		`INSERT INTO outbox_bin VALUES (7, 'e3', 'k', 't', 'p')`)
	got := lr.recv(t, 2)
	evs := got[0].Events
	if len(evs) != 2 || !reflect.DeepEqual(evs[0].PK, []any{"eu", int64(1)}) || !reflect.DeepEqual(evs[1].PK, []any{"us", int64(2)}) {
		t.Fatalf("composite key: %+v", evs)
	}
	if pk := got[1].Events[0].PK; pk != nil {
		t.Fatalf("a table without PrimaryKey carries a key: %v", pk)
	}
}
