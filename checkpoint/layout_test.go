package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
)

func cols(spec string) []LayoutColumn {
	var out []LayoutColumn
	for _, f := range strings.Fields(spec) {
		name, typ, _ := strings.Cut(f, ":")
		out = append(out, LayoutColumn{Name: name, Type: typ})
	}
	return out
}

func TestLayoutDiff(t *testing.T) {
	base := "id:bigint(20) event_id:varchar(64) biz_key:varchar(64) topic:varchar(128) payload:longblob"
	cases := []struct{ name, was, now, want string }{
		{"same", base, base, ""},
		{"swap", base, "id:bigint(20) biz_key:varchar(64) event_id:varchar(64) topic:varchar(128) payload:longblob",
			"columns 2 and 3 swapped: was event_id, biz_key; now biz_key, event_id"},
		{"move", base, "id:bigint(20) topic:varchar(128) event_id:varchar(64) biz_key:varchar(64) payload:longblob",
			"columns 2 to 4 reordered: was event_id, biz_key, topic; now topic, event_id, biz_key"},
		{"add", base, base + " note:text", "column 6 note text added"},
		{"drop", base, "id:bigint(20) event_id:varchar(64) biz_key:varchar(64) payload:longblob", "column 4 topic varchar(128) dropped"},
		{"retype", base, "id:bigint(20) event_id:varchar(36) biz_key:varchar(64) topic:varchar(128) payload:longblob",
			"column event_id retyped: was varchar(64), now varchar(36)"},
		{"drop and swap", base, "id:bigint(20) biz_key:varchar(64) event_id:varchar(64) payload:longblob",
			"column 4 topic varchar(128) dropped; columns 2 and 3 swapped: was event_id, biz_key; now biz_key, event_id"},
		{"case", base, "ID:bigint(20) event_id:varchar(64) biz_key:varchar(64) topic:varchar(128) payload:longblob",
			"column names changed case: was id, event_id, biz_key, topic, payload; now ID, event_id, biz_key, topic, payload"},
		{"unknown", "", base, "its layout at the checkpoint is unknown (it could not be read after a DDL statement on the table)"},
	}
	for _, c := range cases {
		if got := LayoutDiff(cols(c.was), cols(c.now)); got != c.want {
			t.Errorf("%s: LayoutDiff = %q, want %q", c.name, got, c.want)
		}
	}
}

// Layouts survive the file store: the next start compares them.
func TestFileStoreKeepsLayouts(t *testing.T) {
	s, err := Open(t.TempDir() + "/cp.json")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := Layouts{"app.outbox": cols("id:bigint(20) event_id:varchar(64)"), "app.gone": {}}
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5", SavedAt: time.Unix(1, 0).UTC(), Layouts: l}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if LayoutDiff(got.Layouts["app.outbox"], l["app.outbox"]) != "" || got.Layouts["app.gone"] == nil || len(got.Layouts["app.gone"]) != 0 {
		t.Errorf("layouts read back as %#v, want %#v (an unknown layout stays an empty list)", got.Layouts, l)
	}
}

// A checkpoint table created before the layouts column: the store's error gives the ALTER.
func TestWrapNamesAddColumn(t *testing.T) {
	s := &MySQLStore{cfg: MySQLConfig{Table: "outboxd.checkpoint", Name: "relay", Addr: "db:3306"}}
	err := s.wrap("load", &mysqldriver.MySQLError{Number: 1054, Message: "Unknown column 'layouts' in 'field list'"})
	if !errors.Is(err, ErrStoreMisconfigured) || !strings.Contains(err.Error(), "ALTER TABLE `outboxd`.`checkpoint` ADD COLUMN layouts TEXT NULL") {
		t.Errorf("missing column: %v", err)
	}
}
