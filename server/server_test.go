package server

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

func exec(t *testing.T, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// setup starts a server with app.outbox and returns root's pool.
func setup(t *testing.T, o mariadb.Options) (*mariadb.Server, *sql.DB) {
	t.Helper()
	s := mariadb.StartT(t, o)
	root, err := s.DB(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	exec(t, root,
		"CREATE DATABASE app",
		"CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100), payload TEXT)",
		"CREATE TABLE app.other (id INT PRIMARY KEY)")
	return s, root
}

// openAs creates user name with the given GRANT statements (each "%s" is the account) and connects.
func openAs(t *testing.T, s *mariadb.Server, root *sql.DB, name string, grantStmts ...string) *sql.DB {
	t.Helper()
	acct := fmt.Sprintf("'%s'@'%%'", name)
	exec(t, root, "CREATE USER "+acct+" IDENTIFIED BY 'pw'")
	for _, g := range grantStmts {
		exec(t, root, fmt.Sprintf(g, acct))
	}
	db, err := Open(t.Context(), Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: name, Password: "pw"})
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
		ps, err := Check(t.Context(), db, gtid.MariaDB, tables)
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
		ps, err := Check(t.Context(), db, gtid.MariaDB, tables)
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
		ps, err := Check(t.Context(), db, gtid.MariaDB, tables)
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
		if ps, err := Check(t.Context(), db, gtid.MariaDB, tables); err != nil || len(ps) != 0 {
			t.Errorf("after running the fix: %v, %v", ps, err)
		}
	})
	t.Run("no select and no client", func(t *testing.T) {
		db := openAs(t, s, root, "nosel",
			"GRANT REPLICATION SLAVE ON *.* TO %s",
			"GRANT SELECT ON app.other TO %s",
			"GRANT INSERT ON app.outbox TO %s")
		ps, err := Check(t.Context(), db, gtid.MariaDB, tables)
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
		ps, err := Check(t.Context(), root, gtid.MariaDB, []string{"app.outbox", "app.nope"})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := find(ps, "table app.nope")
		if !ok || !strings.HasPrefix(p.Found, "missing (") || p.Check != CheckTableExists || len(ps) != 1 ||
			!strings.HasPrefix(p.Fix, "check the table name") || !strings.Contains(p.Fix, "other, outbox") {
			t.Errorf("want only the missing table, got %v", ps)
		}
		if _, err := Check(t.Context(), root, gtid.MariaDB, []string{"outbox"}); err == nil {
			t.Error("a table name without schema was accepted")
		}
	})
	t.Run("minimal metadata is a problem unless allowed", func(t *testing.T) {
		exec(t, root, "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
		defer exec(t, root, "SET GLOBAL binlog_row_metadata = 'FULL'")
		ps, err := Check(t.Context(), root, gtid.MariaDB, tables)
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
		ps, err := Check(t.Context(), db, gtid.MariaDB, []string{"app.outbx"})
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
		ps, err := Check(t.Context(), root, gtid.MySQL, tables)
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
	ps, err := Check(t.Context(), root, gtid.MariaDB, []string{"app.outbox"})
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

func TestPositionAndPurged(t *testing.T) {
	s, root := setup(t, mariadb.Options{})
	ctx := t.Context()
	db := openAs(t, s, root, "ob",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s",
		"GRANT SELECT ON app.outbox TO %s")

	purged, err := Purged(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	if !purged.IsEmpty() {
		t.Errorf("fresh server purged = %q, want empty", purged.String())
	}

	exec(t, root, "INSERT INTO app.outbox (topic, payload) VALUES ('a', 'x'), ('b', 'y')",
		"INSERT INTO app.outbox (topic, payload) VALUES ('c', 'z')")
	// A second domain, to check multi-domain parsing.
	conn, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET SESSION gtid_domain_id = 7", "INSERT INTO app.other VALUES (1)"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()

	pos, err := Position(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := root.QueryRow("SELECT @@gtid_binlog_pos").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	want, err := gtid.Parse(gtid.MariaDB, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !pos.Equal(want) || !strings.Contains(raw, "7-1-1") {
		t.Errorf("Position = %q, @@gtid_binlog_pos = %q", pos.String(), raw)
	}

	file, off, err := BinlogStatus(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	files, err := BinaryLogs(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if off == 0 || len(files) == 0 || file != files[len(files)-1] {
		t.Errorf("BinlogStatus = %s:%d, binary logs %v", file, off, files)
	}

	// Rotate, then purge everything before the new file. MariaDB may keep the previous file until
	// its binlog checkpoint moves on, so retry until the old file is gone.
	exec(t, root, "FLUSH BINARY LOGS")
	files = purgeToOneFile(t, ctx, root, db)
	purged, err = Purged(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	if !purged.Equal(want) {
		t.Errorf("Purged = %q, want the position before the flush %q", purged.String(), want.String())
	}

	// Writes after the rotation do not change what is purged.
	exec(t, root, "INSERT INTO app.outbox (topic, payload) VALUES ('d', 'w')")
	again, err := Purged(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Equal(want) {
		t.Errorf("Purged after a write = %q, want %q", again.String(), want.String())
	}
	now, err := Position(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	if now.Equal(want) || !now.Contains(want) {
		t.Errorf("Position after a write = %q, want a superset of %q", now.String(), want.String())
	}
}

func TestOpenErrors(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := Open(ctx, Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: "root", Password: "wrong"})
	if err == nil || !strings.Contains(err.Error(), s.Addr) {
		t.Errorf("wrong password: err = %v, want an error naming the address", err)
	}
	if _, err := Open(ctx, Conn{Flavor: "postgres", Addr: s.Addr, User: "root"}); err == nil {
		t.Error("unknown flavor accepted")
	}
	db, err := Open(ctx, Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var cs, coll string
	if err := db.QueryRow("SELECT @@character_set_connection, @@collation_connection").Scan(&cs, &coll); err != nil {
		t.Fatal(err)
	}
	if cs != "utf8mb4" || coll != "utf8mb4_general_ci" {
		t.Errorf("connection charset %s/%s, want utf8mb4/utf8mb4_general_ci", cs, coll)
	}
}

func TestColumnReader(t *testing.T) {
	s, root := setup(t, mariadb.Options{RowMetadata: "MINIMAL"})
	db := openAs(t, s, root, "cols", "GRANT SELECT ON app.outbox TO %s")
	r := &ColumnReader{DB: db}
	ctx := t.Context()
	cols, err := r.Columns(ctx, "app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cols, ","); got != "id,topic,payload" {
		t.Errorf("columns = %s", got)
	}
	// The types the binlog reader compares with each TABLE_MAP (utf8mb4: 4 bytes a character).
	defs, err := r.Definitions(ctx, "app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	want := []Column{
		{Name: "id", DataType: "bigint", ColumnType: "bigint(20)", OctetLength: -1, Precision: 19, Scale: 0, FracDigits: -1},
		{Name: "topic", DataType: "varchar", ColumnType: "varchar(100)", OctetLength: 400, Precision: -1, Scale: -1, FracDigits: -1},
		{Name: "payload", DataType: "text", ColumnType: "text", OctetLength: 65535, Precision: -1, Scale: -1, FracDigits: -1},
	}
	if fmt.Sprint(defs) != fmt.Sprint(want) {
		t.Errorf("definitions = %+v, want %+v", defs, want)
	}
	exec(t, root, "ALTER TABLE app.outbox ADD COLUMN headers TEXT", "ALTER TABLE app.outbox ADD COLUMN kind INT AFTER id")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cols, err := r.Columns(ctx, "app", "outbox")
			if err != nil {
				errs <- err
				return
			}
			if got := strings.Join(cols, ","); got != "id,kind,topic,payload,headers" {
				errs <- fmt.Errorf("columns after ALTER = %s", got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// No privilege on app.other: invisible, reported with the table's name.
	if _, err := r.Columns(ctx, "app", "other"); err == nil || !strings.Contains(err.Error(), "app.other") {
		t.Errorf("invisible table: err = %v", err)
	}
	if _, err := r.Columns(ctx, "app", "missing"); err == nil {
		t.Error("missing table: no error")
	}
}

// After a failover or a server_id change a domain has GTIDs of several servers, and every later
// binlog's Gtid_list names each of them ("[0-2-3,0-1-4]"); with gtid_strict_mode off the last
// one logged may carry a lower sequence number. Purged must read the domain's position (the
// last logged), not refuse the list, or every start with a checkpoint fails on such a server.
func TestPurgedSeveralServersInADomain(t *testing.T) {
	s, root := setup(t, mariadb.Options{})
	ctx := t.Context()
	conn, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"INSERT INTO app.other VALUES (1)",
		"SET SESSION server_id = 2", "INSERT INTO app.other VALUES (2)",
		"SET SESSION server_id = 1", "INSERT INTO app.other VALUES (3)",
		// A promoted server that continued with lower numbers (gtid_strict_mode off).
		"SET GLOBAL gtid_strict_mode = 0",
		"SET SESSION server_id = 3", "SET SESSION gtid_seq_no = 2", "INSERT INTO app.other VALUES (4)",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var raw string
	if err := root.QueryRow("SELECT @@gtid_binlog_pos").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != "0-3-2" {
		t.Fatalf("@@gtid_binlog_pos = %q, want 0-3-2", raw)
	}
	exec(t, root, "FLUSH BINARY LOGS")
	purgeToOneFile(t, ctx, root, root)
	files, err := BinaryLogs(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var list, serverPos string
	if err := root.QueryRow("SELECT BINLOG_GTID_POS(?, 4)", files[0]).Scan(&serverPos); err != nil {
		t.Fatal(err)
	}
	rows, err := root.Query("SHOW BINLOG EVENTS IN '" + files[0] + "' LIMIT 3")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ScanAll(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r["Event_type"] == "Gtid_list" {
			list = r["Info"]
		}
	}
	if strings.Count(list, "0-") != 3 {
		t.Fatalf("Gtid_list of %s = %q, want three servers in domain 0", files[0], list)
	}
	// As the user outboxd runs as.
	db := openAs(t, s, root, "ob", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s")
	purged, err := Purged(ctx, db, gtid.MariaDB)
	if err != nil {
		t.Fatal(err)
	}
	if purged.String() != serverPos {
		t.Errorf("Purged = %q from Gtid_list %s, want the server's position at the oldest binlog's start %q", purged.String(), list, serverPos)
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
	ps, err := Check(t.Context(), db, gtid.MariaDB, []string{"app.outbox"})
	if err != nil || len(ps) != 0 {
		t.Fatalf("as stored: %v, %v", ps, err)
	}
	ps, err = Check(t.Context(), db, gtid.MariaDB, []string{"App.Outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Warning || ps[0].Check != CheckTableExists || !strings.Contains(ps[0].Fix, "app.outbox") {
		t.Errorf("App.Outbox: %+v", ps)
	}
}

// purgeToOneFile purges (as root) every binlog but the newest, retrying until read, as listed on
// db, shows one file: the server purges a file only once its binlog checkpoint has moved on.
func purgeToOneFile(t *testing.T, ctx context.Context, root, db *sql.DB) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		files, err := BinaryLogs(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 1 {
			return files
		}
		if time.Now().After(deadline) {
			t.Fatalf("PURGE BINARY LOGS kept %v", files)
		}
		exec(t, root, "PURGE BINARY LOGS TO '"+files[len(files)-1]+"'")
		time.Sleep(100 * time.Millisecond)
	}
}
