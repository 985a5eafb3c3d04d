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
