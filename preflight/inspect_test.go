package preflight

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

func exec(t *testing.T, db *sql.DB, qs ...string) { t.Helper(); mariadb.ExecT(t, db, qs...) }

// setup starts a server with app.outbox and returns root's pool.
func setup(t *testing.T, o mariadb.Options) (*mariadb.Server, *sql.DB) {
	t.Helper()
	return mariadb.RootT(t, o,
		"CREATE DATABASE app",
		"CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100), payload TEXT)",
		"CREATE TABLE app.other (id INT PRIMARY KEY)")
}

// openAs creates user name with the given GRANT statements (each "%s" is the account) and connects.
func openAs(t *testing.T, s *mariadb.Server, root *sql.DB, name string, grantStmts ...string) *sql.DB {
	t.Helper()
	pw := mariadb.CreateUserT(t, root, name, grantStmts...)
	db, err := server.Open(t.Context(), server.Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: name, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func find(ps []Problem, setting string) (Problem, bool) {
	for _, p := range ps {
		if p.Setting == setting {
			return p, true
		}
	}
	return Problem{}, false
}

func TestCheckMariaDB(t *testing.T) {
	s, root := setup(t, mariadb.Options{})
	tables := []string{"app.outbox"}

	t.Run("correct server and grants", func(t *testing.T) {
		db := openAs(t, s, root, "good",
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s",
			"GRANT SELECT ON app.outbox TO %s")
		ps, err := inspectTables(t.Context(), db, gtid.MariaDB, tables)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 0 {
			t.Errorf("want no problems, got %v", ps)
		}
	})
	t.Run("db-level select via role", func(t *testing.T) {
		exec(t, root, "CREATE ROLE outbox_reader", "GRANT SELECT ON app.* TO outbox_reader")
		db := openAs(t, s, root, "roled",
			"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s",
			"GRANT outbox_reader TO %s",
			"SET DEFAULT ROLE outbox_reader FOR %s")
		ps, err := inspectTables(t.Context(), db, gtid.MariaDB, tables)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 0 {
			t.Errorf("want no problems, got %v", ps)
		}
	})
	t.Run("no replication slave", func(t *testing.T) {
		db := openAs(t, s, root, "noslave",
			"GRANT REPLICATION CLIENT ON *.* TO %s",
			"GRANT SELECT ON app.outbox TO %s")
		ps, err := inspectTables(t.Context(), db, gtid.MariaDB, tables)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "REPLICATION SLAVE")
		if !ok || len(ps) != 1 {
			t.Fatalf("want exactly the REPLICATION SLAVE problem, got %v", ps)
		}
		if p.Warning || p.Fix != "GRANT REPLICATION SLAVE ON *.* TO 'noslave'@'%';" {
			t.Errorf("problem = %+v", p)
		}
		// The fix works as written.
		exec(t, root, p.Fix)
		if ps, err := inspectTables(t.Context(), db, gtid.MariaDB, tables); err != nil || len(ps) != 0 {
			t.Errorf("after running the fix: %v, %v", ps, err)
		}
	})
	t.Run("no select and no client", func(t *testing.T) {
		db := openAs(t, s, root, "nosel",
			"GRANT REPLICATION SLAVE ON *.* TO %s",
			"GRANT SELECT ON app.other TO %s",
			"GRANT INSERT ON app.outbox TO %s")
		ps, err := inspectTables(t.Context(), db, gtid.MariaDB, tables)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "SELECT ON `app`.`outbox`")
		if !ok || !strings.HasPrefix(p.Fix, "GRANT SELECT ON `app`.`outbox` TO 'nosel'@'%';") {
			t.Fatalf("want a SELECT problem with a GRANT fix, got %v", ps)
		}
		if _, ok := find(ps, "REPLICATION CLIENT"); !ok || len(ps) != 2 {
			t.Fatalf("want SELECT and REPLICATION CLIENT problems, got %v", ps)
		}
		if _, ok := find(ps, "table app.outbox"); ok {
			t.Error("reported the table missing although it exists")
		}
	})
	t.Run("missing table and bad name", func(t *testing.T) {
		ps, err := inspectTables(t.Context(), root, gtid.MariaDB, []string{"app.outbox", "app.nope"})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "table app.nope")
		if !ok || !strings.HasPrefix(p.Found, "missing (") || p.Check != CheckTableExists || len(ps) != 1 ||
			!strings.HasPrefix(p.Fix, "check the table name") || !strings.Contains(p.Fix, "other, outbox") {
			t.Errorf("want only the missing table, got %v", ps)
		}
		if _, err := inspectTables(t.Context(), root, gtid.MariaDB, []string{"outbox"}); err == nil {
			t.Error("a table name without schema was accepted")
		}
	})
	t.Run("minimal metadata is a problem unless allowed", func(t *testing.T) {
		exec(t, root, "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
		defer exec(t, root, "SET GLOBAL binlog_row_metadata = 'FULL'")
		ps, err := inspectTables(t.Context(), root, gtid.MariaDB, tables)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "binlog_row_metadata")
		if !ok || p.Warning || p.Found != "MINIMAL" || len(ps) != 1 || !strings.Contains(p.Fix, "allow_minimal_row_metadata") {
			t.Errorf("want one binlog_row_metadata problem, got %v", ps)
		}
		ps, err = Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, Tables: []Table{{Name: "app.outbox"}}, AllowMinimalRowMetadata: true})
		if err != nil {
			t.Fatal(err)
		}
		p, ok = find(ps, "binlog_row_metadata")
		if !ok || !p.Warning || len(ps) != 1 {
			t.Errorf("allowed: want one binlog_row_metadata warning, got %v", ps)
		}
	})
	// A misspelled table of a user with a table-level grant: the server cannot tell missing
	// from forbidden, so the table name comes first and the GRANT (which would fail on a
	// missing table) second.
	t.Run("misspelled table with a table-level grant", func(t *testing.T) {
		db := openAs(t, s, root, "tbl",
			"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s",
			"GRANT SELECT ON app.outbox TO %s")
		ps, err := inspectTables(t.Context(), db, gtid.MariaDB, []string{"app.outbx"})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "table app.outbx")
		if !ok || len(ps) != 1 || p.Check != CheckTableExists || !strings.HasPrefix(p.Found, "missing or not visible") ||
			!strings.HasPrefix(p.Fix, "check the table name first") || !strings.Contains(p.Fix, "can see: outbox") {
			t.Fatalf("want a missing-or-invisible table with the name first, got %v", ps)
		}
		// The GRANT the old check suggested indeed fails on the missing table.
		if _, err := root.ExecContext(t.Context(), "GRANT SELECT ON app.outbx TO 'tbl'@'%'"); err == nil {
			t.Error("GRANT on a missing table succeeded; the advice above is wrong")
		}
	})
	t.Run("missing columns", func(t *testing.T) {
		ps, err := Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, Tables: []Table{{Name: "app.outbox", Field: "tables[0]", Columns: []RoleColumn{
			{Name: "topic", Role: "topic", Required: true, Type: "VARCHAR(128) NOT NULL"},
			{Name: "event_id", Role: "event_id", Required: true, Type: "VARCHAR(64) NOT NULL"},
			{Name: "headers", Role: "headers", Type: "JSON NULL"},
		}}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 2 || ps[0].Setting != "column app.outbox.event_id" || ps[0].Warning || !ps[1].Warning {
			t.Fatalf("want the event_id problem and the headers warning, got %v", ps)
		}
		exec(t, root, strings.Split(ps[0].Fix, ";")[0])
		defer exec(t, root, "ALTER TABLE app.outbox DROP COLUMN event_id")
		ps, err = Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, Tables: []Table{{Name: "app.outbox", Columns: []RoleColumn{
			{Name: "EVENT_ID", Role: "event_id", Required: true}}}}})
		if err != nil || len(ps) != 0 {
			t.Errorf("after the ALTER TABLE of the fix: %v, %v", ps, err)
		}
	})
	t.Run("flavor mismatch", func(t *testing.T) {
		ps, err := inspectTables(t.Context(), root, gtid.MySQL, tables)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 1 || ps[0].Check != CheckFlavor || !strings.HasPrefix(ps[0].Fix, "this server is MariaDB: set source.flavor: mariadb") {
			t.Fatalf("want only the flavor problem, got %v", ps)
		}
		// Skipped, the rest is checked (with MySQL's rules: gtid_mode is not set on MariaDB).
		ps, err = Inspect(t.Context(), root, Request{Flavor: gtid.MySQL, Tables: []Table{{Name: "app.outbox"}}, Skip: []string{CheckFlavor}})
		if err != nil {
			t.Fatal(err)
		}
		if len(Fatal(ps)) == 0 || ps[len(ps)-1].Check != CheckFlavor || !ps[len(ps)-1].Skipped {
			t.Errorf("flavor skipped: got %v", ps)
		}
	})
}

func TestCheckStatementFormat(t *testing.T) {
	_, root := setup(t, mariadb.Options{BinlogFormat: "STATEMENT"})
	ps, err := inspectTables(t.Context(), root, gtid.MariaDB, []string{"app.outbox"})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := find(ps, "binlog_format")
	if !ok || len(ps) != 1 {
		t.Fatalf("want exactly a binlog_format problem, got %v", ps)
	}
	if p.Warning || p.Found != "STATEMENT" || !strings.Contains(p.Fix, "SET GLOBAL binlog_format = 'ROW'") ||
		!strings.Contains(p.Fix, "my.cnf") {
		t.Errorf("problem = %+v", p)
	}
}

// With lower_case_table_names=1 the server finds app.Outbox for app.outbox, but the binlog names
// the table as stored (lower case) and outboxd matches names exactly, so a config that spells it
// otherwise would read no row: check must say so (run refuses on it), not pass.
func TestCheckTableNameCase(t *testing.T) {
	s, root := setup(t, mariadb.Options{ExtraArgs: []string{"--lower-case-table-names=1"}})
	db := openAs(t, s, root, "ob",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s",
		"GRANT SELECT ON app.outbox TO %s")
	ps, err := inspectTables(t.Context(), db, gtid.MariaDB, []string{"app.outbox"})
	if err != nil || len(ps) != 0 {
		t.Fatalf("as stored: %v, %v", ps, err)
	}
	ps, err = inspectTables(t.Context(), db, gtid.MariaDB, []string{"App.Outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Warning || ps[0].Check != CheckTableExists || !strings.Contains(ps[0].Fix, "app.outbox") {
		t.Errorf("App.Outbox: %+v", ps)
	}
}

// A live server's retention under source.min_binlog_retention is a warning, a skipped one is
// marked so, and one equal to the minimum is none.
func TestInspectRetention(t *testing.T) {
	_, root := setup(t, mariadb.Options{ExtraArgs: []string{"--binlog-expire-logs-seconds=600"}})
	ps, err := Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, MinBinlogRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := find(ps, "binlog retention")
	if !ok || !p.Warning || len(Fatal(ps)) != 0 {
		t.Errorf("Inspect: %+v", ps)
	}
	ps, err = Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, MinBinlogRetention: time.Hour, Skip: []string{CheckBinlogRetention}})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := find(ps, "binlog retention"); !ok || !p.Skipped {
		t.Errorf("skip_checks binlog_retention: %+v", ps)
	}
	ps, err = Inspect(t.Context(), root, Request{Flavor: gtid.MariaDB, MinBinlogRetention: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := find(ps, "binlog retention"); ok {
		t.Errorf("a retention equal to the minimum warned: %+v", ps)
	}

}

func TestRetentionProblem(t *testing.T) {
	short := server.Retention{Period: 10 * time.Minute, Source: "binlog_expire_logs_seconds = 600"}
	p := RetentionProblem(gtid.MariaDB, short, 24*time.Hour)
	if p == nil || !p.Warning || p.Check != CheckBinlogRetention {
		t.Fatalf("short retention: %+v", p)
	}
	for _, want := range []string{"10m0s (binlog_expire_logs_seconds = 600)", "source.min_binlog_retention 24h0m0s"} {
		if !strings.Contains(p.Found, want) {
			t.Errorf("found %q lacks %q", p.Found, want)
		}
	}
	if !strings.Contains(p.Fix, "SET GLOBAL binlog_expire_logs_seconds = 86400;") || !strings.Contains(p.Fix, "my.cnf") {
		t.Errorf("MariaDB fix: %q", p.Fix)
	}
	if p := RetentionProblem(gtid.MySQL, short, 24*time.Hour); p == nil || !strings.HasPrefix(p.Fix, "SET PERSIST binlog_expire_logs_seconds = 86400;") {
		t.Errorf("MySQL fix: %+v", p)
	}
	for name, c := range map[string]struct {
		r   server.Retention
		min time.Duration
	}{
		"long enough": {server.Retention{Period: 24 * time.Hour}, 24 * time.Hour},
		"forever":     {server.Retention{Forever: true}, 24 * time.Hour},
		"unknown":     {server.Retention{}, 24 * time.Hour},
		"no minimum":  {short, 0},
	} {
		if p := RetentionProblem(gtid.MariaDB, c.r, c.min); p != nil {
			t.Errorf("%s: %+v", name, p)
		}
	}
	// RDS purges by its own setting, so the fix is its procedure.
	p = RetentionProblem(gtid.MySQL, server.Retention{Period: 5 * time.Minute, Source: "mysql.rds_configuration 'binlog retention hours' = NULL", RDS: true}, 24*time.Hour)
	if p == nil || !strings.Contains(p.Fix, "CALL mysql.rds_set_configuration('binlog retention hours', 24);") {
		t.Errorf("RDS fix: %+v", p)
	}
}
