package mariadb

import (
	"testing"

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
