package serverproc

import (
	"os"
	"testing"
)

// RequireT skips the test under -short, or when find reports the server binary missing, except
// that with $CI set a missing binary fails it: CI installs or builds every server (make deps), so
// its absence there is a bug. what names the server; skip is the local skip message, which says
// how to get the binary ("" means find's error).
func RequireT(t testing.TB, what string, find func() (string, error), skip string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration test: needs %s (-short)", what)
	}
	if _, err := find(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI is set, so this test must not skip)", err)
		}
		if skip == "" {
			skip = err.Error()
		}
		t.Skip(skip)
	}
}

// Server is a test server that Cleanup closes.
type Server interface {
	Close() error
	// LogTail returns about the last n bytes of the server's log.
	LogTail(n int) string
}

// Cleanup registers with t.Cleanup the close of s, a server of kind what ("mariadb", "dolt")
// listening on addr, logging the tail of its log first when the test failed.
func Cleanup(t testing.TB, what, addr string, s Server) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s %s log tail:\n%s", what, addr, s.LogTail(3000))
		}
		if err := s.Close(); err != nil {
			t.Errorf("close %s: %v", what, err)
		}
	})
}
