package binlog

import (
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// A TIMESTAMP is an instant: its epoch millis, whatever zone go-mysql gave the time.Time. A
// DATETIME is wall-clock text for the router to read in the configured zone.
func TestTimeField(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	at := time.Date(2026, 3, 1, 14, 30, 0, 123e6, kolkata) // 09:00:00.123Z
	p := projection{tm: &replication.TableMapEvent{ColumnType: []byte{mysql.MYSQL_TYPE_TIMESTAMP2, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_LONGLONG}}}
	row := []any{at, time.Date(2026, 3, 1, 14, 30, 0, 123e6, time.UTC), int64(1772355600500)}
	if got := string(p.timeField(0, row, nil).Bytes); got != "1772355600123" {
		t.Errorf("TIMESTAMP: %q, want epoch millis 1772355600123", got)
	}
	if got := string(p.timeField(1, row, nil).Bytes); got != "2026-03-01 14:30:00.123" {
		t.Errorf("DATETIME: %q", got)
	}
	if got := string(p.timeField(2, row, nil).Bytes); got != "1772355600500" {
		t.Errorf("BIGINT: %q", got)
	}
	if f := p.timeField(0, []any{nil}, nil); !f.Null {
		t.Errorf("NULL: %+v", f)
	}
	if f := p.timeField(-1, row, nil); !f.Missing {
		t.Errorf("absent column: %+v", f)
	}
}

// Only tables that watch updates have their UPDATE row images decoded.
func TestFilterWatchesUpdates(t *testing.T) {
	f := NewTableFilter([]TableSpec{{Schema: "s", Table: "warned", OnUpdate: "warn"}, {Schema: "s", Table: "plain"}})
	if _, ok := f.updates[tableKey{"s", "warned"}]; !ok {
		t.Error("warn table does not watch updates")
	}
	if _, ok := f.updates[tableKey{"s", "plain"}]; ok {
		t.Error("a table without on_update watches updates")
	}
	for _, s := range []string{"", "ignore"} {
		if (TableSpec{OnUpdate: s}).WatchUpdates() {
			t.Errorf("on_update %q watches updates", s)
		}
	}
}
