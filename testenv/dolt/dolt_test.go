package dolt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The build script and the tests must agree on the version, or a test looks for a binary the
// script never builds.
func TestScriptBuildsVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "install-dolt.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nDOLT_VERSION="+Version+" ") {
		t.Errorf("scripts/install-dolt.sh does not set DOLT_VERSION=%s", Version)
	}
	if !strings.Contains(string(b), `dir="${OUTBOXD_CACHE:-$HOME/.cache/outboxd}/dolt-${DOLT_VERSION}"`) {
		t.Errorf("scripts/install-dolt.sh builds somewhere else than CachePath")
	}
}

func TestBinaryLookup(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUTBOXD_CACHE", dir)
	t.Setenv("OUTBOXD_DOLT", "")
	if got, want := CachePath(), filepath.Join(dir, "dolt-"+Version, "dolt"); got != want {
		t.Fatalf("CachePath = %s, want %s", got, want)
	}
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Errorf("Binary with nothing built: %v, want an error saying make deps builds it", err)
	}
	if err := os.MkdirAll(filepath.Dir(CachePath()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(CachePath(), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Binary(); err != nil || got != CachePath() {
		t.Errorf("Binary = %q, %v; want the cached %s", got, err, CachePath())
	}
	t.Setenv("OUTBOXD_DOLT", filepath.Join(dir, "nope"))
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "OUTBOXD_DOLT") {
		t.Errorf("Binary with a missing OUTBOXD_DOLT: %v, want an error naming it", err)
	}
}

// A started server is a MySQL-flavor binlog primary as outboxd's MySQL flavor needs it.
func TestStartBinlogPrimary(t *testing.T) {
	s := StartT(t, Options{})
	db, err := s.DB(t.Context(), "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var logBin, gtidMode, enforce, format, image, meta string
	var serverID int
	err = db.QueryRow("SELECT @@log_bin, @@gtid_mode, @@enforce_gtid_consistency, @@server_id, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata").
		Scan(&logBin, &gtidMode, &enforce, &serverID, &format, &image, &meta)
	if err != nil {
		t.Fatal(err)
	}
	if logBin != "1" || gtidMode != "ON" || enforce != "ON" || serverID != ServerID || format != "ROW" || image != "FULL" || meta != "FULL" {
		t.Errorf("log_bin=%s gtid_mode=%s enforce_gtid_consistency=%s server_id=%d binlog_format=%s binlog_row_image=%s binlog_row_metadata=%s",
			logBin, gtidMode, enforce, serverID, format, image, meta)
	}
	if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var executed string
	if err := db.QueryRow("SELECT @@global.gtid_executed").Scan(&executed); err != nil {
		t.Fatal(err)
	}
	// CREATE DATABASE, CREATE TABLE, the INSERT.
	if !strings.HasSuffix(executed, ":1-3") {
		t.Errorf("@@gtid_executed = %q, want uuid:1-3", executed)
	}
	if err := GrantRelay(t.Context(), db, "relay", "pw", "probe.t"); err != nil {
		t.Fatal(err)
	}
}
