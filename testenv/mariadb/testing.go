package mariadb

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/internal/serverproc"
)

// StartT starts a server for a test and registers Close (plus the error log tail on failure) with
// t.Cleanup. When mariadbd is not installed it fails the test if $CI is set and skips it
// otherwise. It blocks like Start and stops the test with t.Fatal on any start error.
func StartT(t testing.TB, o Options) *Server {
	t.Helper()
	RequireT(t)
	s, err := Start(t.Context(), o)
	if err != nil {
		t.Fatalf("start mariadb: %v", err)
	}
	serverproc.Cleanup(t, "mariadb", s.Addr, s)
	return s
}

// RequireT skips the test under -short or when mariadbd is not installed, except that with $CI
// set a missing mariadbd fails it: CI installs MariaDB, so its absence there is a bug.
func RequireT(t testing.TB) {
	t.Helper()
	serverproc.RequireT(t, "MariaDB", Binary, "mariadbd not found: apt-get install -y mariadb-server")
}

// ExecT runs each statement on db in order, failing t at the first error.
func ExecT(t testing.TB, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// RootT starts a server for a test (StartT), opens root's pool (closed with t.Cleanup) and runs
// stmts on it, failing t on any error.
func RootT(t testing.TB, o Options, stmts ...string) (*Server, *sql.DB) {
	t.Helper()
	s := StartT(t, o)
	root, err := s.DB(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	ExecT(t, root, stmts...)
	return s, root
}

// CreateUserT creates the account 'name'@'%' with the password "pw" on root and runs each
// grant statement, in which "%s" stands for the account. It returns the password.
func CreateUserT(t testing.TB, root *sql.DB, name string, grants ...string) string {
	t.Helper()
	acct := fmt.Sprintf("'%s'@'%%'", name)
	ExecT(t, root, "CREATE USER "+acct+" IDENTIFIED BY 'pw'")
	for _, g := range grants {
		ExecT(t, root, fmt.Sprintf(g, acct))
	}
	return "pw"
}

// FakeClockT is NewFakeClock for a test, with its file in a temporary directory. When
// libfaketime is not installed it fails the test if $CI is set (CI installs the faketime
// package) and skips it otherwise.
func FakeClockT(t testing.TB, offset time.Duration) *FakeClock {
	t.Helper()
	serverproc.RequireT(t, "libfaketime", FakeTimeLib, "libfaketime not found: apt-get install -y faketime")
	c, err := NewFakeClock(t.TempDir(), offset)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitClockT waits until the server's clock is offset from this host's by want, within tol,
// and fails t after timeout: proof that a FakeClock took effect, so a test of skew cannot pass
// on an unskewed server.
func WaitClockT(t testing.TB, db *sql.DB, want, tol, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := ClockOffset(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		if (got - want).Abs() <= tol {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock is %s from this host's after %s, want %s (± %s): libfaketime did not take effect", got, timeout, want, tol)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
