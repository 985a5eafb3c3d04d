package dolt

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/outboxd/outboxd/testenv/internal/serverproc"
)

// StartT starts a server for a test and registers Close (plus the log tail on failure) with
// t.Cleanup. It fails or skips the test as RequireT says when the binary is missing, and stops
// the test with t.Fatal on any start error. It blocks like Start.
func StartT(t testing.TB, o Options) *Server {
	t.Helper()
	RequireT(t)
	s, err := Start(t.Context(), o)
	if err != nil {
		t.Fatalf("start dolt: %v", err)
	}
	serverproc.Cleanup(t, "dolt", s.Addr, s)
	return s
}

// RequireT skips the test under -short or when the dolt binary is missing, except that with $CI
// set a missing binary fails it: CI builds Dolt (make deps), so its absence there is a bug.
func RequireT(t testing.TB) {
	t.Helper()
	serverproc.RequireT(t, "Dolt", Binary, "")
}

// GrantRelay creates user@'%' with password and the privileges outboxd's user needs on a
// MySQL-flavor server: REPLICATION SLAVE and REPLICATION CLIENT on *.*, SELECT on each table
// ("schema.table"), and, for Dolt only, SELECT ON mysql.*, without which Dolt refuses the
// user's own SHOW GRANTS (MySQL needs no privilege for that). It blocks on the statements; db is
// a root pool. Safe for concurrent use with other users' names.
func GrantRelay(ctx context.Context, db *sql.DB, user, password string, tables ...string) error {
	account := "'" + user + "'@'%'"
	stmts := []string{
		"CREATE USER " + account + " IDENTIFIED BY '" + password + "'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO " + account,
		"GRANT SELECT ON mysql.* TO " + account,
	}
	for _, t := range tables {
		stmts = append(stmts, "GRANT SELECT ON "+t+" TO "+account)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("dolt: %s: %w", q, err)
		}
	}
	return nil
}
