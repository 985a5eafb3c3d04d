package kafkaread

import (
	"testing"

	"github.com/outboxd/outboxd/testenv/internal/serverproc"
)

// RequireKcat skips the test under -short or when kcat is not installed, except that with $CI
// set a missing kcat fails it: CI installs it (scripts/install-deps.sh), so its absence there
// is a bug.
func RequireKcat(t testing.TB) {
	t.Helper()
	serverproc.RequireT(t, "kcat", KcatPath, "")
}
