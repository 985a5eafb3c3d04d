package preflight

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
)

// retention: 0 deletes by the primary key the TABLE_MAP carries, which only
// binlog_row_metadata=FULL writes: with MINIMAL accepted, check and run warn, per such table,
// that nothing of it is deleted by key; FULL, or a table that is not deleted by key, gets no
// such warning.
func TestCleanupKeysNeedFullRowMetadata(t *testing.T) {
	cfg, err := config.Parse([]byte(`source: {flavor: mariadb, addr: "127.0.0.1:1", user: u, password: "", server_id: 7, allow_minimal_row_metadata: true}
cleanup: {retention: 0s}
tables:
  - {table: shop.keys}
  - {table: shop.swept, columns: {created_at: created_at}, cleanup: {retention: 1h}}
  - {table: shop.both, columns: {created_at: created_at}}
  - {table: shop.off, cleanup: {enabled: false}}
sinks: {k: {type: kafka, brokers: ["127.0.0.1:1"]}}
routes: [{sink: k}]
`))
	if err != nil {
		t.Fatal(err)
	}
	minimal := []Problem{{Setting: "binlog_row_metadata", Found: "MINIMAL", Check: CheckBinlogRowMetadata, Warning: true}}
	ws := cleanupKeyWarnings(cfg, minimal)
	if len(ws) != 2 {
		t.Fatalf("want a warning for shop.keys and shop.both, got %+v", ws)
	}
	for i, want := range []string{"shop.keys", "shop.both"} {
		w := ws[i]
		line := sourceLine("db:3306", w)
		if !w.Warning || w.Table != want || w.Check != CheckBinlogRowMetadata ||
			!strings.Contains(line, "retention: 0") || !strings.Contains(line, "MINIMAL") || !strings.Contains(line, "binlog_row_metadata = FULL") {
			t.Errorf("warning %d: %+v\n%s", i, w, line)
		}
	}
	if !strings.Contains(sourceLine("db:3306", ws[0]), "nothing") || !strings.Contains(sourceLine("db:3306", ws[1]), "sweep") {
		t.Errorf("shop.keys is never cleaned, shop.both only by the sweep:\n%s\n%s", sourceLine("db:3306", ws[0]), sourceLine("db:3306", ws[1]))
	}
	if ws := cleanupKeyWarnings(cfg, nil); len(ws) != 0 {
		t.Fatalf("FULL: %+v", ws)
	}
}
