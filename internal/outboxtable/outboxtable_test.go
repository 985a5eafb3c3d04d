package outboxtable

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestDDL(t *testing.T) {
	d := DDL("outbox_event")
	if !strings.HasPrefix(d, "CREATE TABLE outbox_event (\n  id ") || !strings.HasSuffix(d, "  UNIQUE KEY uk_event_id (event_id)\n)") {
		t.Errorf("DDL:\n%s", d)
	}
	for _, c := range columns {
		if !strings.Contains(d, "\n  "+c.Name+" ") || !strings.Contains(normalise(d), c.Name+" "+c.Definition()+",") {
			t.Errorf("DDL lacks %s %s:\n%s", c.Name, c.Definition(), d)
		}
	}
	if got, want := DDLIfNotExists("bench.outbox_event"), strings.Replace(DDL("bench.outbox_event"), "CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1); got != want {
		t.Errorf("DDLIfNotExists:\n%s\nwant\n%s", got, want)
	}
}

// The types `outboxd check` expected before this package.
func TestType(t *testing.T) {
	for role, want := range map[string]string{
		"event_id":   "VARCHAR(64) NOT NULL",
		"key":        "VARCHAR(64) NOT NULL",
		"topic":      "VARCHAR(128) NOT NULL",
		"payload":    "JSON NOT NULL",
		"event_type": "VARCHAR(64) NULL",
		"headers":    "JSON NULL",
		"created_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
		"":           "",
		"id":         "",
	} {
		if got := Type(role); got != want {
			t.Errorf("Type(%q) = %q, want %q", role, got, want)
		}
	}
	cs := Columns()
	cs[0].Name = "x"
	if columns[0].Name != "id" {
		t.Error("changing Columns' result changed the table")
	}
}

// TestDocsCopies keeps the SQL copies of the table that Go cannot generate equal to DDL, up to
// whitespace, "--" comments and the final semicolon.
func TestDocsCopies(t *testing.T) {
	for _, c := range []struct{ file, table string }{
		{"../../docs/getting-started/preparing-the-database.md", "outbox_event"},
		{"../../deploy/mysql/init.sql", "shop.outbox_event"},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		head := "CREATE TABLE " + c.table + " ("
		i := strings.Index(string(b), head)
		if i < 0 {
			t.Errorf("%s has no %q: update this test if the table moved", c.file, head)
			continue
		}
		rest := string(b[i:])
		j := strings.Index(rest, "\n);")
		if j < 0 {
			t.Errorf("%s: %q has no closing \");\" line", c.file, head)
			continue
		}
		if got, want := normalise(rest[:j+3]), normalise(DDL(c.table)); got != want {
			t.Errorf("%s's outbox table differs from outboxtable.DDL; make it:\n%s;\n(got, normalised: %s)", c.file, DDL(c.table), got)
		}
	}
}

var comment = regexp.MustCompile(`--[^\n]*`)

func normalise(sql string) string {
	sql = comment.ReplaceAllString(sql, "")
	sql = strings.TrimSuffix(strings.TrimSpace(sql), ";")
	return strings.Join(strings.Fields(sql), " ")
}
