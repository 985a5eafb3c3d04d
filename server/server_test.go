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
	db, err := Open(t.Context(), Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: name, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
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
