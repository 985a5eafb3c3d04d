package preflight

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func checksOf(items []Item) string {
	var s []string
	for _, it := range items {
		s = append(s, it.Check+"/"+it.Subject)
	}
	return strings.Join(s, " ")
}

func TestVerifiedSource(t *testing.T) {
	cols := []RoleColumn{{Name: "event_id"}, {Name: "payload"}}
	req := Request{Flavor: gtid.MariaDB, Tables: []Table{{Name: "a.o", Columns: cols}, {Name: "b.o", Columns: cols}}}
	all := "flavor/source.flavor log_bin/log_bin binlog_format/binlog_format binlog_row_image/binlog_row_image " +
		"binlog_row_metadata/binlog_row_metadata server_id/server_id gtid_strict_mode/gtid_strict_mode " +
		"replication_slave/REPLICATION SLAVE replication_client/REPLICATION CLIENT"
	tables := func(names ...string) string {
		var s []string
		for _, n := range names {
			s = append(s, fmt.Sprintf("table_exists/table %s table_select/table %s table_columns/table %s", n, n, n))
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		name  string
		req   Request
		found []Problem
		want  string
	}{
		{"nothing found", req, nil, all + " " + tables("a.o", "b.o")},
		{"a problem, a warning and a skipped finding each remove their check",
			Request{Flavor: gtid.MariaDB, Tables: req.Tables, Skip: []string{"server_id"}},
			[]Problem{
				{Check: CheckBinlogFormat},
				{Check: CheckGTIDStrictMode, Warning: true},
				{Check: CheckServerID, Skipped: true},
			},
			strings.NewReplacer(" binlog_format/binlog_format", "", " server_id/server_id", "", " gtid_strict_mode/gtid_strict_mode", "").Replace(all) + " " + tables("a.o", "b.o")},
		{"a missing table runs none of its checks", req,
			[]Problem{{Check: CheckTableExists, Table: "a.o"}},
			all + " " + tables("b.o")},
		{"a missing column fails only that table's column check", req,
			[]Problem{{Check: CheckTableColumns, Table: "b.o"}},
			all + " " + tables("a.o") + " table_exists/table b.o table_select/table b.o"},
		{"the other flavor: nothing else ran", req, []Problem{{Check: CheckFlavor}}, ""},
		{"mysql has its own gtid checks", Request{Flavor: gtid.MySQL}, nil,
			strings.Replace(all, "gtid_strict_mode/gtid_strict_mode", "gtid_mode/gtid_mode enforce_gtid_consistency/enforce_gtid_consistency", 1)},
	}
	for _, c := range cases {
		if got := checksOf(verifiedSource(c.req, c.found)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
