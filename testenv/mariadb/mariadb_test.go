package mariadb

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func query1(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRowContext(t.Context(), q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v.String
}

func TestStartUTF8AndSettings(t *testing.T) {
	s := StartT(t, Options{})
	if s.Port == 0 || s.Addr == "" {
		t.Fatalf("no address: %+v", s)
	}
	db, err := s.DB(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for q, want := range map[string]string{
		"SELECT @@log_bin":                               "1",
		"SELECT @@binlog_format":                         "ROW",
		"SELECT @@binlog_row_image":                      "FULL",
		"SELECT @@binlog_row_metadata":                   "FULL",
		"SELECT @@gtid_strict_mode":                      "1",
		"SELECT @@server_id":                             "1",
		"SELECT @@character_set_server":                  "utf8mb4",
		"SELECT @@character_set_client":                  "utf8mb4",
		"SELECT @@character_set_results":                 "utf8mb4",
		"SELECT @@bind_address":                          "127.0.0.1",
		"SELECT DATABASE()":                              "app",
		"SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)": "root",
	} {
		if got := query1(t, db, q); got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}
	if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(100)) DEFAULT CHARSET=utf8mb4"); err != nil {
		t.Fatal(err)
	}
	const text = "héllo 😀 世界"
	if _, err := db.Exec("INSERT INTO t VALUES (1, ?)", text); err != nil {
		t.Fatal(err)
	}
	if got := query1(t, db, "SELECT s FROM t WHERE id=1"); got != text {
		t.Errorf("read back %q, want %q", got, text)
	}
	// 4 bytes for the emoji, 2 for é, 3 each for the CJK characters: stored as UTF-8, not double-encoded.
	if got := query1(t, db, "SELECT LENGTH(s) FROM t WHERE id=1"); got != "18" {
		t.Errorf("LENGTH = %s, want 18", got)
	}
	if got := query1(t, db, "SELECT @@gtid_binlog_pos"); !strings.HasPrefix(got, "0-1-") {
		t.Errorf("gtid_binlog_pos = %q, want 0-1-N", got)
	}
	if !s.Running() {
		t.Error("Running() = false for a live server")
	}
}

func TestRestartKillAndOptions(t *testing.T) {
	s := StartT(t, Options{})
	db, err := s.DB(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	port := s.Port

	if err := s.Restart(t.Context(), Options{RowMetadata: "MINIMAL", BinlogFormat: "STATEMENT"}); err != nil {
		t.Fatal(err)
	}
	if s.Port != port {
		t.Errorf("port changed on restart: %d -> %d", port, s.Port)
	}
	db, err = s.DB(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	if got := query1(t, db, "SELECT @@binlog_row_metadata"); got != "MINIMAL" {
		t.Errorf("binlog_row_metadata = %q after restart with MINIMAL", got)
	}
	if got := query1(t, db, "SELECT @@binlog_format"); got != "STATEMENT" {
		t.Errorf("binlog_format = %q after restart with STATEMENT", got)
	}
	if got := query1(t, db, "SELECT COUNT(*) FROM t"); got != "1" {
		t.Errorf("rows after restart = %s, want 1", got)
	}
	if _, err := db.Exec("INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	pos := query1(t, db, "SELECT @@gtid_binlog_pos")
	db.Close()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("Running() after Kill")
	}
	if err := s.Restart(t.Context(), Options{}); err != nil {
		t.Fatal(err)
	}
	db, err = s.DB(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := query1(t, db, "SELECT COUNT(*) FROM t"); got != "2" {
		t.Errorf("rows after kill -9 and restart = %s, want 2", got)
	}
	if got := query1(t, db, "SELECT @@binlog_row_metadata"); got != "FULL" {
		t.Errorf("binlog_row_metadata = %q after restart with defaults", got)
	}
	if got := query1(t, db, "SELECT @@gtid_binlog_pos"); got != pos {
		t.Errorf("gtid_binlog_pos after kill+restart = %q, want %q", got, pos)
	}
}

func TestTwoServersAtOnce(t *testing.T) {
	a := StartT(t, Options{})
	b := StartT(t, Options{})
	if a.Port == b.Port || a.Dir == b.Dir {
		t.Fatalf("servers share port or dir: %s %s / %s %s", a.Addr, a.Dir, b.Addr, b.Dir)
	}
	for i, s := range []*Server{a, b} {
		db, err := s.DB(t.Context(), "d")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		for j := 0; j <= i; j++ {
			if _, err := db.Exec("INSERT INTO t VALUES (?)", j); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
	}
	for i, s := range []*Server{a, b} {
		db, err := s.DB(t.Context(), "d")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := query1(t, db, "SELECT COUNT(*) FROM t"), string(rune('1'+i)); got != want {
			t.Errorf("server %d has %s rows, want %s", i, got, want)
		}
		db.Close()
	}
}

func TestCloseRemovesOwnDirKeepsGivenDir(t *testing.T) {
	RequireT(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("own dir %s still exists after Close: %v", dir, err)
	}

	given := filepath.Join(t.TempDir(), "a-rather-long-directory-name-to-push-the-socket-path-beyond-the-unix-limit-of-108-bytes")
	s, err = Start(ctx, Options{Dir: given})
	if err != nil {
		t.Fatal(err)
	}
	db, err := s.DB(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (id INT)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(given, "data", "keep")); err != nil {
		t.Fatalf("given dir was not kept: %v", err)
	}
	// Reuse the initialized datadir.
	s, err = Start(ctx, Options{Dir: given})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err = s.DB(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := query1(t, db, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='keep' AND table_name='t'"); got != "1" {
		t.Errorf("table from the first run missing after reusing the dir")
	}
}

func TestStartFailsWithLog(t *testing.T) {
	RequireT(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := Start(ctx, Options{ExtraArgs: []string{"--no-such-option-here=1"}})
	if err == nil {
		t.Fatal("Start with a bad flag succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-option-here") {
		t.Errorf("error does not show the server log: %v", err)
	}
}

func TestTemplateDatadir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	a := StartT(t, Options{})
	tmpls, _ := filepath.Glob(filepath.Join(tmp, "outboxd-mariadb-template-*", templateMarker))
	if len(tmpls) != 1 {
		t.Fatalf("want one complete template in %s, got %v", tmp, tmpls)
	}
	leftovers, _ := filepath.Glob(filepath.Join(tmp, "outboxd-mariadb-template-tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("template staging dirs left behind: %v", leftovers)
	}
	// A server from the template is independent of the first one.
	b := StartT(t, Options{})
	for _, s := range []*Server{a, b} {
		db, err := s.DB(t.Context(), "x")
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	// A damaged template (marker present, data gone) falls back to mariadb-install-db.
	data := filepath.Join(filepath.Dir(tmpls[0]), "data")
	if err := os.RemoveAll(filepath.Join(data, "mysql")); err != nil {
		t.Fatal(err)
	}
	c := StartT(t, Options{})
	db, err := c.DB(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := query1(t, db, "SELECT COUNT(*) FROM mysql.user WHERE user='root' AND host='127.0.0.1'"); got != "1" {
		t.Errorf("root@127.0.0.1 rows = %s", got)
	}
	if !initialized(data) {
		t.Error("the damaged template was not replaced")
	}
}

// A server under a FakeClock reads its clock offset (NOW(), created_at defaults) and Set moves
// it while it runs, from ahead to behind; a restart keeps it.
func TestFakeClock(t *testing.T) {
	const day = 24 * time.Hour
	c := FakeClockT(t, 2*day)
	s, db := RootT(t, Options{Env: c.Env()},
		"CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))")
	WaitClockT(t, db, 2*day, 5*time.Second, 0)
	ExecT(t, db, "INSERT INTO app.t (id) VALUES (1)")
	var at time.Time
	if err := db.QueryRow("SELECT at FROM app.t WHERE id = 1").Scan(&at); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(at); (d - 2*day).Abs() > 5*time.Second {
		t.Fatalf("created_at %s is %s from now, want 2 days ahead", at, d)
	}
	if err := c.Set(-2 * day); err != nil {
		t.Fatal(err)
	}
	WaitClockT(t, db, -2*day, 5*time.Second, 5*time.Second)
	if err := s.Restart(t.Context(), Options{Env: c.Env()}); err != nil {
		t.Fatal(err)
	}
	WaitClockT(t, db, -2*day, 5*time.Second, 0)
}
