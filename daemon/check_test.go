package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
)

func checksOf(items []CheckItem) string {
	var s []string
	for _, it := range items {
		s = append(s, it.Check+"/"+it.Subject)
	}
	return strings.Join(s, " ")
}

func TestVerifiedSource(t *testing.T) {
	cols := []server.RoleColumn{{Name: "event_id"}, {Name: "payload"}}
	req := server.Request{Flavor: gtid.MariaDB, Tables: []server.Table{{Name: "a.o", Columns: cols}, {Name: "b.o", Columns: cols}}}
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
		req   server.Request
		found []server.Problem
		want  string
	}{
		{"nothing found", req, nil, all + " " + tables("a.o", "b.o")},
		{"a problem, a warning and a skipped finding each remove their check",
			server.Request{Flavor: gtid.MariaDB, Tables: req.Tables, Skip: []string{"server_id"}},
			[]server.Problem{
				{Check: server.CheckBinlogFormat},
				{Check: server.CheckGTIDStrictMode, Warning: true},
				{Check: server.CheckServerID, Skipped: true},
			},
			strings.NewReplacer(" binlog_format/binlog_format", "", " server_id/server_id", "", " gtid_strict_mode/gtid_strict_mode", "").Replace(all) + " " + tables("a.o", "b.o")},
		{"a missing table runs none of its checks", req,
			[]server.Problem{{Check: server.CheckTableExists, Table: "a.o"}},
			all + " " + tables("b.o")},
		{"a missing column fails only that table's column check", req,
			[]server.Problem{{Check: server.CheckTableColumns, Table: "b.o"}},
			all + " " + tables("a.o") + " table_exists/table b.o table_select/table b.o"},
		{"the other flavor: nothing else ran", req, []server.Problem{{Check: server.CheckFlavor}}, ""},
		{"mysql has its own gtid checks", server.Request{Flavor: gtid.MySQL}, nil,
			strings.Replace(all, "gtid_strict_mode/gtid_strict_mode", "gtid_mode/gtid_mode enforce_gtid_consistency/enforce_gtid_consistency", 1)},
	}
	for _, c := range cases {
		if got := checksOf(verifiedSource(c.req, c.found)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
