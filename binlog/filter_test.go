package binlog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

func shardPatterns() []TablePattern {
	return []TablePattern{
		{Text: "shop_*.outbox_event", Schema: "shop_*", Table: "outbox_event", Spec: TableSpec{Columns: ColumnNames{Key: "aggregate_id"}}},
		{Text: "shop_0?.outbox*", Schema: "shop_0?", Table: "outbox*", Spec: TableSpec{OnUpdate: "warn"}},
	}
}

func TestTableFilterPatterns(t *testing.T) {
	f := NewTableFilter([]TableSpec{{Schema: "shop_01", Table: "outbox_event"}}, shardPatterns()...)
	for _, tc := range []struct {
		schema, table string
		outbox        bool
		pattern       string // "" for a listed table or none
	}{
		{"shop_01", "outbox_event", true, ""}, // listed: never the pattern's
		{"shop_02", "outbox_event", true, "shop_*.outbox_event"},
		{"shop_07", "outbox_event_2", true, "shop_0?.outbox*"}, // the first matching pattern
		{"shop_17", "outbox_event_2", false, ""},
		{"shop_02", "orders", false, ""},
		{"shop", "outbox_event", false, ""},
		{"SHOP_02", "outbox_event", false, ""}, // case-sensitive, as the binlog names tables
	} {
		for range 2 { // the second answer comes from the cache
			if got := f.IsOutbox(tc.schema, tc.table); got != tc.outbox {
				t.Errorf("IsOutbox(%s.%s) = %v, want %v", tc.schema, tc.table, got, tc.outbox)
			}
			p, ok := f.Pattern(tc.schema, tc.table)
			if p.Text != tc.pattern || ok != (tc.pattern != "") {
				t.Errorf("Pattern(%s.%s) = %q, %v; want %q", tc.schema, tc.table, p.Text, ok, tc.pattern)
			}
			if ok && (p.Spec.Schema != tc.schema || p.Spec.Table != tc.table) {
				t.Errorf("Pattern(%s.%s).Spec names %s.%s", tc.schema, tc.table, p.Spec.Schema, p.Spec.Table)
			}
		}
	}
	// Each unlisted name was decided once, matching or not, so a busy business table costs a
	// map lookup per rows event, not a glob match.
	n := 0
	f.pats.decided.Range(func(any, any) bool { n++; return true })
	if n != 6 {
		t.Errorf("decided %d table names, want 6 (every unlisted name asked about)", n)
	}
	if !f.watchesUpdates("shop_07", "outbox_x") || f.watchesUpdates("shop_12", "outbox_event") {
		t.Error("watchesUpdates does not follow the matching pattern's on_update")
	}
	if NewTableFilter(nil).IsOutbox("shop_02", "outbox_event") {
		t.Error("a filter without patterns matched an unlisted table")
	}
}

type admitFunc func(ctx context.Context, schema, table, pattern string) error

func (f admitFunc) Admit(ctx context.Context, schema, table, pattern string) error {
	return f(ctx, schema, table, pattern)
}

// A table found by pattern is checked once, at its first row, before any of its rows goes
// out; a failing check stops the stream at that row.
func TestAssemblerAdmitsPatternTables(t *testing.T) {
	var admitted []string
	bad := errors.New("outbox table shop_03.outbox_event: no column biz_key")
	a := NewAssembler(AssemblerConfig{Flavor: gtid.MariaDB, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Tables:   []TableSpec{{Schema: "shop", Table: "outbox"}},
		Patterns: shardPatterns()[:1],
		Admit: admitFunc(func(_ context.Context, schema, table, pattern string) error {
			admitted = append(admitted, schema+"."+table+" "+pattern)
			if schema == "shop_03" {
				return bad
			}
			return nil
		}),
	})
	ctx := context.Background()
	evs := []*replication.BinlogEvent{
		mariaGTID(100, 1, 0),
		tableRows("shop_01", "outbox_event", 2),
		outboxRows(1),
		tableRows("shop_02", "outbox_event", 1),
		tableRows("shop_01", "outbox_event", 1),
		tableRows("shop_02", "orders", 3),
		ev(replication.XID_EVENT, 200, &replication.XIDEvent{}),
	}
	var txn *Txn
	for i, e := range evs {
		got, err := a.Handle(ctx, e)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got != nil {
			txn = got
		}
	}
	if txn == nil || len(txn.Events) != 5 {
		t.Fatalf("txn = %+v, want 5 events", txn)
	}
	want := []string{"shop_01.outbox_event", "shop_01.outbox_event", "shop.outbox", "shop_02.outbox_event", "shop_01.outbox_event"}
	for i, e := range txn.Events {
		if got := e.Schema + "." + e.Table; got != want[i] {
			t.Errorf("event %d from %s, want %s", i, got, want[i])
		}
	}
	if len(admitted) != 2 || admitted[0] != "shop_01.outbox_event shop_*.outbox_event" || admitted[1] != "shop_02.outbox_event shop_*.outbox_event" {
		t.Errorf("admitted %q, want shop_01 then shop_02, once each", admitted)
	}

	for _, e := range []*replication.BinlogEvent{mariaGTID(300, 2, 0), tableRows("shop_01", "outbox_event", 1)} {
		if _, err := a.Handle(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.Handle(ctx, tableRows("shop_03", "outbox_event", 1))
	if !errors.Is(err, bad) {
		t.Fatalf("rows of a table failing the checks: err = %v, want the check's error", err)
	}
	for _, w := range []string{"shop_03.outbox_event", `"shop_*.outbox_event"`, "0-1-2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}
