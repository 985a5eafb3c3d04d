package replication

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

func open(t *testing.T, s *mariadb.Server) *sql.DB {
	t.Helper()
	db, err := s.DB(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func q1(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRowContext(t.Context(), q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v.String
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// seq returns the sequence number of a single-domain MariaDB position "0-S-N", failing unless its
// domain is 0 and its server id is server.
func seq(t *testing.T, pos string, server int) int {
	t.Helper()
	f := strings.Split(pos, "-")
	if len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(server) {
		t.Fatalf("position %q: want 0-%d-N (domain 0 kept, server id %d)", pos, server, server)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A switchover keeps every row on both servers, the new primary continues the sequence in
// domain 0 under its own server id, the old primary follows it, and a second switchover returns
// the roles.
func TestSwitchoverKeepsDomainAndOldPrimaryFollows(t *testing.T) {
	p := StartPair(t, Options{})
	first, second := p.Primary(), p.Replica()
	if first.Port == second.Port {
		t.Fatal("both servers on one port")
	}
	pdb, rdb := open(t, first), open(t, second)
	if got := q1(t, pdb, "SELECT @@server_id"); got != "1" {
		t.Fatalf("primary server_id %s", got)
	}
	for q, want := range map[string]string{
		"SELECT @@server_id": "2", "SELECT @@read_only": "1", "SELECT @@log_slave_updates": "1",
		"SELECT @@gtid_strict_mode": "1", "SELECT @@binlog_format": "ROW", "SELECT @@binlog_row_metadata": "FULL",
	} {
		if got := q1(t, rdb, q); got != want {
			t.Errorf("replica %s = %s, want %s", q, got, want)
		}
	}
	mustExec(t, pdb, "CREATE DATABASE app")
	mustExec(t, pdb, "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))")
	for i := 1; i <= 3; i++ {
		mustExec(t, pdb, "INSERT INTO app.t VALUES (?, 'one')", i)
	}
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := q1(t, rdb, "SELECT COUNT(*) FROM app.t"); got != "3" {
		t.Fatalf("replica has %s rows, want 3", got)
	}
	before := q1(t, pdb, "SELECT @@gtid_binlog_pos")
	m := seq(t, before, 1)
	// log_slave_updates: the replica's binlog holds the primary's GTIDs as they are.
	if got := q1(t, rdb, "SELECT @@gtid_binlog_pos"); got != before {
		t.Errorf("replica gtid_binlog_pos %q, want the primary's %q", got, before)
	}

	if err := p.Promote(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p.Primary() != second || p.Replica() != first {
		t.Fatal("roles not swapped by Promote")
	}
	if got := q1(t, rdb, "SELECT @@read_only"); got != "0" {
		t.Errorf("new primary read_only = %s", got)
	}
	if got := q1(t, pdb, "SELECT @@read_only"); got != "1" {
		t.Errorf("old primary read_only = %s", got)
	}
	mustExec(t, rdb, "INSERT INTO app.t VALUES (4, 'two')")
	after := q1(t, rdb, "SELECT @@gtid_binlog_pos")
	if n := seq(t, after, 2); n != m+1 {
		t.Errorf("new primary wrote %s after %s: want 0-2-%d", after, before, m+1)
	}
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := q1(t, pdb, "SELECT v FROM app.t WHERE id = 4"); got != "two" {
		t.Errorf("old primary did not follow: row 4 = %q", got)
	}
	if got := q1(t, pdb, "SELECT @@gtid_binlog_pos"); got != after {
		t.Errorf("old primary gtid_binlog_pos %q, want %q", got, after)
	}

	// And back: the first server leads again and continues the domain under server id 1.
	if err := p.Promote(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p.Primary() != first {
		t.Fatal("second Promote did not return the roles")
	}
	mustExec(t, pdb, "INSERT INTO app.t VALUES (5, 'three')")
	if n := seq(t, q1(t, pdb, "SELECT @@gtid_binlog_pos"), 1); n != m+2 {
		t.Errorf("after switching back: sequence %d, want %d", n, m+2)
	}
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := q1(t, rdb, "SELECT COUNT(*) FROM app.t"); got != "5" {
		t.Errorf("second server has %s rows after switching back, want 5", got)
	}
}

// After a crash the replica takes over without waiting; a transaction it never received stays
// only on the dead primary, whose diverged history then cannot rejoin. Without such a
// transaction the old primary rejoins as a replica.
func TestPromoteAfterCrashAndRejoin(t *testing.T) {
	p := StartPair(t, Options{ExtraArgs: []string{"--binlog-expire-logs-seconds=3600"}})
	first, second := p.Primary(), p.Replica()
	pdb, rdb := open(t, first), open(t, second)
	mustExec(t, pdb, "CREATE DATABASE app")
	mustExec(t, pdb, "CREATE TABLE app.t (id INT PRIMARY KEY)")
	mustExec(t, pdb, "INSERT INTO app.t VALUES (1)")
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	m := seq(t, q1(t, pdb, "SELECT @@gtid_binlog_pos"), 1)

	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.PromoteAfterCrash(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p.Primary() != second || first.Running() {
		t.Fatal("roles not swapped, or the old primary runs")
	}
	if err := p.WaitCaughtUp(ctxT(t)); err == nil {
		t.Error("WaitCaughtUp with nothing replicating returned nil")
	}
	mustExec(t, rdb, "INSERT INTO app.t VALUES (2)")
	if n := seq(t, q1(t, rdb, "SELECT @@gtid_binlog_pos"), 2); n != m+1 {
		t.Errorf("new primary sequence %d, want %d", n, m+1)
	}
	// Nothing was lost: the old primary rejoins and gets row 2; the restart kept ExtraArgs.
	if err := p.Rejoin(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pdb = open(t, first)
	if got := q1(t, pdb, "SELECT COUNT(*) FROM app.t"); got != "2" {
		t.Errorf("rejoined server has %s rows, want 2", got)
	}
	for q, want := range map[string]string{"SELECT @@server_id": "1", "SELECT @@read_only": "1", "SELECT @@binlog_expire_logs_seconds": "3600"} {
		if got := q1(t, pdb, q); got != want {
			t.Errorf("rejoined %s = %s, want %s", q, got, want)
		}
	}

	// Now a transaction only the primary (second) has: the replica's IO thread is stopped.
	mustExec(t, pdb, "STOP SLAVE IO_THREAD")
	mustExec(t, rdb, "INSERT INTO app.t VALUES (3)")
	lost := q1(t, rdb, "SELECT @@gtid_binlog_pos")
	if err := p.PromoteAfterCrash(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p.Primary() != first || second.Running() {
		t.Fatal("second crash: roles not swapped, or the old primary runs")
	}
	mustExec(t, pdb, "INSERT INTO app.t VALUES (4)")
	got := q1(t, pdb, "SELECT @@gtid_binlog_pos")
	if n := seq(t, got, 1); n != m+2 {
		t.Errorf("new primary sequence %d, want %d (the lost one's number again)", n, m+2)
	}
	if got := q1(t, pdb, "SELECT COUNT(*) FROM app.t WHERE id = 3"); got != "0" {
		t.Errorf("the lost transaction %s is on the new primary", lost)
	}
	// The same sequence number on both servers, different server ids: a diverged history.
	if seq(t, lost, 2) != m+2 {
		t.Errorf("lost GTID %s, want 0-2-%d", lost, m+2)
	}
	err := p.Rejoin(ctxT(t))
	if err == nil {
		t.Fatal("the diverged old primary rejoined")
	}
	if !strings.Contains(err.Error(), "1236") && !strings.Contains(fmt.Sprint(err), "binlog") {
		t.Errorf("rejoin error does not say why: %v", err)
	}
	t.Logf("diverged rejoin: %v", err)
}

// A diverged old primary is rebuilt as a fresh replica: it keeps its address, gets a new server
// id, copies the primary's whole history (including what the first primary wrote under the id
// it had) and none of its own lost transaction, and can be promoted again.
func TestRebuildDivergedOldPrimary(t *testing.T) {
	p := StartPair(t, Options{})
	first, second := p.Primary(), p.Replica()
	pdb, rdb := open(t, first), open(t, second)
	mustExec(t, pdb, "CREATE DATABASE app")
	mustExec(t, pdb, "CREATE TABLE app.t (id INT PRIMARY KEY)")
	mustExec(t, pdb, "INSERT INTO app.t VALUES (1), (2)")
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.PauseReplication(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pdb, "INSERT INTO app.t VALUES (3)") // only on the first primary
	if err := p.PromoteAfterCrash(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, rdb, "INSERT INTO app.t VALUES (4)")
	if err := p.Rejoin(ctxT(t)); err == nil {
		t.Fatal("the diverged old primary rejoined")
	}
	if err := p.Rebuild(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p.Replica() != first || p.Primary() != second {
		t.Fatal("Rebuild changed the roles")
	}
	pdb = open(t, first)
	if got := q1(t, pdb, "SELECT GROUP_CONCAT(id ORDER BY id) FROM app.t"); got != "1,2,4" {
		t.Errorf("rebuilt server has rows %s, want 1,2,4 (the lost 3 gone, the first primary's 1 and 2 copied)", got)
	}
	if got, want := q1(t, pdb, "SELECT @@server_id"), "3"; got != want || p.ServerID(first) != want {
		t.Errorf("rebuilt server id %s (ServerID %s), want %s", got, p.ServerID(first), want)
	}
	if got, want := q1(t, pdb, "SELECT @@gtid_binlog_state"), q1(t, rdb, "SELECT @@gtid_binlog_state"); got != want {
		t.Errorf("rebuilt server's binlog state %q, want the primary's %q (log_slave_updates: the same history)", got, want)
	}
	if got := q1(t, pdb, "SELECT @@read_only"); got != "1" {
		t.Errorf("rebuilt server read_only = %s, want 1", got)
	}
	// It is a full member again: a switchover makes it the primary.
	if err := p.Promote(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pdb, "INSERT INTO app.t VALUES (5)")
	if err := p.WaitCaughtUp(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := q1(t, rdb, "SELECT COUNT(*) FROM app.t"); got != "4" {
		t.Errorf("after promoting the rebuilt server the other has %s rows, want 4", got)
	}
}
