package preflight

import (
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func mustGrants(t *testing.T, text string) grants {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	gs, err := parseGrantLines(lines)
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// Lines captured from MariaDB 10.11.19 and from MySQL 8.0/8.4 documentation and servers.
func TestGrantsMariaDB(t *testing.T) {
	cases := []struct {
		name          string
		lines         string
		slave, client bool
		selects       map[string]bool // "db.table" -> want
	}{
		{
			name: "table grant",
			lines: "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `u1`@`%` IDENTIFIED BY PASSWORD '*7B9EBEED26AA52ED10C0F549FA863F13C39E0209'\n" +
				"GRANT SELECT ON `app`.`outbox` TO `u1`@`%`",
			slave: true, client: true,
			selects: map[string]bool{"app.outbox": true, "app.other": false, "other.outbox": false},
		},
		{
			name:  "global select",
			lines: "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `u2`@`%` IDENTIFIED BY PASSWORD '*7B9E'",
			slave: true, client: true,
			selects: map[string]bool{"app.outbox": true, "x.y": true},
		},
		{
			name: "db grant, column grant, no client",
			lines: "GRANT REPLICATION SLAVE ON *.* TO `u3`@`%` IDENTIFIED BY PASSWORD '*7B9E'\n" +
				"GRANT SELECT, INSERT ON `app`.* TO `u3`@`%`\n" +
				"GRANT SELECT (`i`) ON `other`.`x` TO `u3`@`%`",
			slave: true, client: false,
			selects: map[string]bool{"app.outbox": true, "app.anything": true, "other.x": false, "apps.outbox": false},
		},
		{
			name: "all privileges and a role",
			lines: "GRANT `r1` TO `u4`@`%`\n" +
				"GRANT ALL PRIVILEGES ON *.* TO `u4`@`%`\n" +
				"SET DEFAULT ROLE `r1` FOR `u4`@`%`",
			slave: true, client: true,
			selects: map[string]bool{"app.outbox": true},
		},
		{
			name:    "SUPER is not enough on MariaDB 10.5+, admin privileges are not slave",
			lines:   "GRANT REPLICATION MASTER ADMIN, BINLOG ADMIN, BINLOG REPLAY, SLAVE MONITOR, SUPER ON *.* TO `u5`@`%`",
			selects: map[string]bool{"app.outbox": false},
		},
		{
			name: "db-level all privileges, usage with ssl",
			lines: "GRANT USAGE ON *.* TO `u6`@`%` REQUIRE SSL\n" +
				"GRANT ALL PRIVILEGES ON `app`.* TO `u6`@`%`",
			selects: map[string]bool{"app.outbox": true, "b.outbox": false},
		},
		{
			name: "like pattern and active role privileges",
			lines: "GRANT `r1` TO `u8`@`%`\n" +
				"GRANT USAGE ON *.* TO `u8`@`%`\n" +
				"GRANT USAGE ON *.* TO `r1`\n" +
				"GRANT REPLICATION SLAVE ON *.* TO `r1`\n" +
				"GRANT SELECT ON `a\\_b%`.* TO `r1`\n" +
				"SET DEFAULT ROLE `r1` FOR `u8`@`%`",
			slave:   true,
			selects: map[string]bool{"a_b.t": true, "a_bcd.t": true, "axb.t": false, "a_.t": false},
		},
		{
			name: "quoted names with backticks and grant option",
			lines: "GRANT REPLICATION SLAVE ON *.* TO `u9`@`%`\n" +
				"GRANT SELECT ON `my``db`.`out box` TO `u9`@`%` WITH GRANT OPTION\n" +
				"GRANT EXECUTE ON PROCEDURE `app`.`p` TO `u9`@`%`\n" +
				"GRANT PROXY ON ''@'%' TO 'u9'@'%' WITH GRANT OPTION",
			slave:   true,
			selects: map[string]bool{"my`db.out box": true, "mydb.out box": false},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := mustGrants(t, c.lines)
			if got := gs.hasGlobal("REPLICATION SLAVE", "REPLICATION REPLICA"); got != c.slave {
				t.Errorf("replication slave = %v, want %v", got, c.slave)
			}
			if got := gs.hasGlobal("BINLOG MONITOR", "REPLICATION CLIENT"); got != c.client {
				t.Errorf("replication client = %v, want %v", got, c.client)
			}
			for tbl, want := range c.selects {
				s, tb, _ := strings.Cut(tbl, ".")
				if got := gs.canSelect(s, tb); got != want {
					t.Errorf("canSelect(%s) = %v, want %v", tbl, got, want)
				}
			}
		})
	}
}

func TestGrantsMySQL8(t *testing.T) {
	gs := mustGrants(t, `
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `+"`outboxd`@`%`"+`
GRANT BACKUP_ADMIN,BINLOG_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `+"`outboxd`@`%`"+`
GRANT `+"`reader`@`%`"+` TO `+"`outboxd`@`%`"+`
REVOKE SELECT ON `+"`secret`.*"+` FROM `+"`outboxd`@`%`")
	if !gs.hasGlobal("REPLICATION SLAVE") || !gs.hasGlobal("REPLICATION CLIENT", "SUPER") {
		t.Error("MySQL 8 replication privileges not recognised")
	}
	if !gs.canSelect("app", "outbox") {
		t.Error("global SELECT not recognised")
	}
	if gs.canSelect("secret", "outbox") {
		t.Error("partial revoke on `secret`.* ignored")
	}
	var roles []string
	for _, g := range gs {
		roles = append(roles, g.Roles...)
	}
	if len(roles) != 1 || roles[0] != "reader@%" {
		t.Errorf("roles = %q, want [reader@%%]", roles)
	}

	// MySQL 5.7 quoting: single quotes around the account, ALL PRIVILEGES at the global level.
	gs = mustGrants(t, `
GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION`)
	if !gs.hasGlobal("REPLICATION SLAVE") || !gs.canSelect("a", "b") {
		t.Error("ALL PRIVILEGES should imply every privilege")
	}

	gs = mustGrants(t, `
GRANT USAGE ON *.* TO `+"`u`@`%`"+`
GRANT SELECT (`+"`id`, `payload`"+`), INSERT ON `+"`app`.`outbox`"+` TO `+"`u`@`%`")
	if gs.hasGlobal("REPLICATION SLAVE") || gs.canSelect("app", "outbox") {
		t.Error("USAGE and column-level SELECT must not count")
	}
	if !gs[1].ColumnPrivs["SELECT"] || !gs[1].Privs["INSERT"] {
		t.Errorf("column privileges not parsed: %+v", gs[1])
	}
}

func TestParseGrantBadInput(t *testing.T) {
	for _, l := range []string{
		"GRANT SELECT ON `app.outbox TO u",
		"GRANT SELECT (`a` ON app.t TO u",
		"GRANT SELECT ON app TO u",
		"GRANT SELECT",
	} {
		if _, _, err := parseGrant(l); err == nil {
			t.Errorf("parseGrant(%q) accepted malformed input", l)
		}
	}
	if _, ok, err := parseGrant("SET DEFAULT ROLE `r1` FOR `u`@`%`"); ok || err != nil {
		t.Errorf("SET DEFAULT ROLE: ok=%v err=%v, want skipped", ok, err)
	}
}

func TestCheckVars(t *testing.T) {
	good := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
		"binlog_row_metadata": "FULL", "server_id": "1", "gtid_mode": "ON", "enforce_gtid_consistency": "ON", "gtid_strict_mode": "ON"}
	for _, f := range []gtid.Flavor{gtid.MySQL, gtid.MariaDB} {
		if ps := checkVars(f, good, false); len(ps) != 0 {
			t.Errorf("%s good settings: %v", f, ps)
		}
	}
	bad := map[string]string{"log_bin": "OFF", "binlog_format": "MIXED", "binlog_row_image": "MINIMAL",
		"binlog_row_metadata": "MINIMAL", "server_id": "0", "gtid_mode": "OFF_PERMISSIVE", "enforce_gtid_consistency": "WARN"}
	got := map[string]Problem{}
	for _, p := range checkVars(gtid.MySQL, bad, false) {
		got[p.Setting] = p
		if !slices.Contains(CheckNames(), p.Check) {
			t.Errorf("%s: check name %q is not one of CheckNames", p.Setting, p.Check)
		}
	}
	for _, s := range []string{"log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id", "gtid_mode", "enforce_gtid_consistency"} {
		p, ok := got[s]
		if !ok {
			t.Errorf("MySQL: no problem for %s", s)
			continue
		}
		if p.Warning {
			t.Errorf("%s: Warning = %v, want a problem", s, p.Warning)
		}
		if !strings.Contains(p.Fix, s) {
			t.Errorf("%s: fix does not name the setting: %q", s, p.Fix)
		}
	}
	if p := got["binlog_format"]; p.Found != "MIXED" || !strings.Contains(p.Fix, "SET PERSIST binlog_format = 'ROW'") {
		t.Errorf("binlog_format problem = %+v", p)
	}
	noLog := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
		"binlog_row_metadata": "NO_LOG", "server_id": "1", "gtid_strict_mode": "OFF"}
	ps := checkVars(gtid.MariaDB, noLog, true)
	if len(ps) != 2 || !ps[0].Warning || !ps[1].Warning {
		t.Errorf("MariaDB NO_LOG allowed + strict off: want two warnings, got %v", ps)
	}
	// Without allow_minimal_row_metadata the metadata is a problem that names the override.
	ps = checkVars(gtid.MariaDB, noLog, false)
	if len(ps) != 2 || ps[0].Warning || ps[0].Check != CheckBinlogRowMetadata ||
		!strings.Contains(ps[0].Fix, "source.allow_minimal_row_metadata: true") || !ps[1].Warning {
		t.Errorf("MariaDB NO_LOG + strict off: want a metadata problem and a warning, got %v", ps)
	}
	// A server without the variable cannot log names: a warning whatever the setting.
	delete(noLog, "binlog_row_metadata")
	if ps := checkVars(gtid.MariaDB, noLog, false); len(ps) != 2 || !ps[0].Warning {
		t.Errorf("no binlog_row_metadata variable: want warnings, got %v", ps)
	}
}

func TestMissingColumns(t *testing.T) {
	tbl := Table{Name: "shop.outbox", Field: "tables[1]", Columns: []RoleColumn{
		{Name: "event_id", Role: "event_id", Required: true, Type: "VARCHAR(64) NOT NULL"},
		{Name: "Topic", Role: "topic", Required: true, Type: "VARCHAR(255) NOT NULL"},
		{Name: "headers", Role: "headers", Type: "JSON NULL"},
	}}
	ps := MissingColumns("shop", "outbox", tbl, []string{"id", "topic", "payload"})
	if len(ps) != 2 {
		t.Fatalf("want event_id and headers reported, got %v", ps)
	}
	if p := ps[0]; p.Warning || p.Check != CheckTableColumns ||
		!strings.Contains(p.Fix, "ALTER TABLE `shop`.`outbox` ADD COLUMN `event_id` VARCHAR(64) NOT NULL;") ||
		!strings.Contains(p.Fix, "tables[1].columns.event_id") || !strings.Contains(p.Found, "id, topic, payload") {
		t.Errorf("required column: %+v", p)
	}
	if p := ps[1]; !p.Warning || !strings.Contains(p.Fix, "tables[1].columns.headers") {
		t.Errorf("optional column: %+v", p)
	}
}

func TestIsMariaDB(t *testing.T) {
	for _, c := range []struct {
		version, comment string
		want             bool
	}{
		{"10.11.6-MariaDB-0+deb12u1-log", "Debian 12", true},
		{"5.5.5-10.11.6-MariaDB", "", true},
		{"8.0.36", "MySQL Community Server - GPL", false},
		{"8.0.33", "Dolt", false},
		{"8.0.33", "mariadb.org binary distribution", true},
	} {
		if got := IsMariaDB(c.version, c.comment); got != c.want {
			t.Errorf("IsMariaDB(%q, %q) = %v", c.version, c.comment, got)
		}
	}
}
