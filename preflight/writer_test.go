package preflight_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/replication"
)

// The cleanup writer must be a writable primary: a replica is found by its replication
// connection whatever its read_only, a read-only server by read_only, and an account that may
// not read the replication status gets the grant to run, never a pass.
func TestInspectCleanupWriter(t *testing.T) {
	p := replication.StartPair(t, replication.Options{})
	open := func(s *mariadb.Server, user, pw string) *sql.DB {
		db, err := server.Open(t.Context(), server.Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: user, Password: pw})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	inspect := func(db *sql.DB) (*preflight.Problem, string) {
		t.Helper()
		pr, reason, err := preflight.InspectCleanupWriter(t.Context(), db, gtid.MariaDB)
		if err != nil {
			t.Fatal(err)
		}
		return pr, reason
	}
	primary, replica := open(p.Primary(), "root", ""), open(p.Replica(), "root", "")
	if pr, _ := inspect(primary); pr != nil {
		t.Fatalf("the primary: %v", pr)
	}
	if pr, reason := inspect(replica); pr == nil || reason != preflight.WriterReadOnly || pr.Setting != "read_only" {
		t.Fatalf("the read-only replica: %v (%s)", pr, reason)
	}
	if _, err := replica.Exec("SET GLOBAL read_only = 0"); err != nil {
		t.Fatal(err)
	}
	pr, reason := inspect(replica)
	if pr == nil || reason != preflight.WriterReplica || !strings.Contains(pr.Found, "Slave_SQL_Running Yes") || !strings.Contains(pr.Fix, "checkpoint.writer_addr") {
		t.Fatalf("the writable replica: %v (%s)", pr, reason)
	}
	// A replica whose threads are stopped is still one: started again it would break.
	if _, err := replica.Exec("STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	if pr, reason := inspect(replica); pr == nil || reason != preflight.WriterReplica || !strings.Contains(pr.Found, "Slave_SQL_Running No") {
		t.Fatalf("the stopped replica: %v (%s)", pr, reason)
	}
	// REPLICATION CLIENT (BINLOG MONITOR) does not show the replication status on MariaDB 10.11.
	for _, q := range []string{"CREATE USER 'mon'@'%' IDENTIFIED BY 'pw'", "GRANT REPLICATION CLIENT, DELETE ON *.* TO 'mon'@'%'"} {
		if _, err := primary.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	pr, reason = inspect(open(p.Primary(), "mon", "pw"))
	if pr == nil || reason != preflight.WriterUnverified || pr.Setting != "SLAVE MONITOR" || !strings.Contains(pr.Fix, "GRANT SLAVE MONITOR ON *.* TO 'mon'@'%'") {
		t.Fatalf("without SLAVE MONITOR: %v (%s)", pr, reason)
	}
	if _, err := primary.Exec("GRANT SLAVE MONITOR ON *.* TO 'mon'@'%'"); err != nil {
		t.Fatal(err)
	}
	if pr, _ := inspect(open(p.Primary(), "mon", "pw")); pr != nil {
		t.Fatalf("with SLAVE MONITOR: %v", pr)
	}
}
