package config

import (
	"slices"
	"strings"
	"testing"
)

func withTables(tables string) string {
	return strings.Replace(minimal, "  - table: shop.outbox_event\n", tables, 1)
}

func TestParseTablePattern(t *testing.T) {
	for _, tc := range []struct {
		in          string
		match, miss [][2]string
		err         string
	}{
		{in: "shop_*.outbox_event", match: [][2]string{{"shop_00", "outbox_event"}, {"shop_", "outbox_event"}},
			miss: [][2]string{{"shop", "outbox_event"}, {"shop_00", "outbox_event_1"}, {"xshop_00", "outbox_event"}}},
		{in: "shop.outbox_event_[0-9][0-9][0-9]", match: [][2]string{{"shop", "outbox_event_007"}},
			miss: [][2]string{{"shop", "outbox_event_07"}, {"shop", "outbox_event_0071"}}},
		// * never crosses the dot: the schema glob sees the schema only.
		{in: "*.outbox", match: [][2]string{{"a", "outbox"}}, miss: [][2]string{{"a", "b.outbox"}, {"a", "outboxes"}}},
		{in: "", err: "is empty"},
		{in: "shop_*", err: `not "schema_glob.table_glob"`},
		{in: "a.b.c*", err: `not "schema_glob.table_glob"`},
		{in: "shop.outbox", err: "write it as table: shop.outbox"},
		{in: "shop_[.outbox", err: "not a valid glob"},
		{in: "`shop_*`.outbox", err: "quote"},
	} {
		p, err := ParseTablePattern(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTablePattern(%q) = %v, want error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ParseTablePattern(%q): %v", tc.in, err)
		}
		for _, m := range tc.match {
			if !p.Match(m[0], m[1]) {
				t.Errorf("%q does not match %s.%s", tc.in, m[0], m[1])
			}
		}
		for _, m := range tc.miss {
			if p.Match(m[0], m[1]) {
				t.Errorf("%q matches %s.%s", tc.in, m[0], m[1])
			}
		}
	}
	if (TablePattern{}).Match("a", "b") {
		t.Error("the zero TablePattern matches")
	}
}

func TestPatternEntryValidation(t *testing.T) {
	got := mustFail(t, withTables(`  - pattern: "shop_*"
  - {table: shop.outbox, pattern: "shop_*.outbox"}
  - pattern: "shop_*.outbox_event"
  - pattern: "shop_*.outbox_event"
  - pattern: "a_*.outbox"
    cleanup: {retention: 0s}
`), noEnv)
	wantContains(t, got,
		`tables[0].pattern`, `"shop_*" is not "schema_glob.table_glob"`,
		`tables[1].pattern`, `an entry names one table (table:) or a pattern of tables (pattern:), not both`,
		`tables[3].pattern`, `"shop_*.outbox_event" is already listed as tables[2]`,
		`tables[4].pattern`, `cleanup does not take pattern entries`)

	got = mustFail(t, withTables(`  - pattern: "shop_*.outbox_event"
`)+"reconcile: {}\n", noEnv)
	wantContains(t, got, "reconcile does not take pattern entries")

	// A table name with glob characters points at pattern:.
	got = mustFail(t, withTables("  - table: shop_*.outbox_event\n"), noEnv)
	wantContains(t, got, `for many tables use pattern:`)
}

func TestPatternNeedsFullRowMetadata(t *testing.T) {
	y := withTables("  - pattern: \"shop_*.outbox_event\"\n")
	y = strings.Replace(y, "  server_id: 4242\n", "  server_id: 4242\n  allow_minimal_row_metadata: true\n", 1)
	wantContains(t, mustFail(t, y, noEnv), "tables[0].pattern", "needs binlog_row_metadata=FULL")
}

func TestPatternEntryExpandsAndScopes(t *testing.T) {
	c, err := parse([]byte(withTables(`  - table: shop_01.outbox_event
  - pattern: "shop_*.outbox_event"
    columns: {key: aggregate_id}
  - pattern: "audit_*.outbox"
`)), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	wantScope := []string{"audit_*.outbox", "shop_*.outbox_event", "shop_01.outbox_event"}
	if got := c.ScopeTables(); !slices.Equal(got, wantScope) {
		t.Fatalf("ScopeTables = %v, want %v", got, wantScope)
	}
	server := []string{"shop_00.outbox_event", "shop_01.outbox_event", "shop_02.outbox_event", "shop_02.other", "audit.outbox"}
	x, empty := c.Expand(func(TablePattern) []string { return server })
	var names []string
	for _, tb := range x.Tables {
		names = append(names, tb.Table)
	}
	if want := []string{"shop_01.outbox_event", "shop_00.outbox_event", "shop_02.outbox_event"}; !slices.Equal(names, want) {
		t.Fatalf("expanded tables = %v, want %v", names, want)
	}
	if !slices.Equal(empty, []int{2}) {
		t.Errorf("patterns matching nothing = %v, want [2]", empty)
	}
	// The listed entry keeps its own columns; the expanded ones take the pattern entry's.
	if x.Tables[0].Columns.Key != "biz_key" || x.Tables[1].Columns.Key != "aggregate_id" {
		t.Errorf("columns.key = %q, %q; want biz_key, aggregate_id", x.Tables[0].Columns.Key, x.Tables[1].Columns.Key)
	}
	if f := x.Tables[2].Field(2); f != "tables[1]" {
		t.Errorf("expanded table's field = %s, want the pattern entry's tables[1]", f)
	}
	// The expanded copy stands for the same checkpoint scope and HA group.
	if got := x.ScopeTables(); !slices.Equal(got, []string{"shop_*.outbox_event", "shop_01.outbox_event"}) {
		t.Errorf("expanded ScopeTables = %v", got)
	}
	if tb, i, ok := c.TableFor("shop_07", "outbox_event"); !ok || i != 1 || tb.Columns.Key != "aggregate_id" {
		t.Errorf("TableFor(shop_07.outbox_event) = %v, %d, %v", tb, i, ok)
	}
	if _, i, _ := c.TableFor("shop_01", "outbox_event"); i != 0 {
		t.Errorf("TableFor(shop_01.outbox_event) = %d, want the listed entry 0", i)
	}
	if _, _, ok := c.TableFor("shop_07", "other"); ok {
		t.Error("TableFor matched a table of no entry")
	}
}

func TestPatternMayNotCoverCheckpointTable(t *testing.T) {
	y := withTables("  - pattern: \"outbox*.*\"\n") + "checkpoint: {store: mysql, name: main}\n"
	wantContains(t, mustFail(t, y, noEnv), "checkpoint.table")
}

// A global cleanup block is fine beside a pattern entry that opts out of it.
func TestPatternEntryOptsOutOfCleanup(t *testing.T) {
	y := withTables(`  - table: shop.outbox_event
  - pattern: "shop_*.outbox_event"
    cleanup: {enabled: false}
`) + "cleanup: {retention: 0s}\n"
	if _, err := parse([]byte(y), noEnv); err != nil {
		t.Fatalf("a pattern entry with cleanup.enabled: false is refused: %v", err)
	}
}
