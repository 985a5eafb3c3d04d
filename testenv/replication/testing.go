package replication

import (
	"testing"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// StartPair starts a primary and its replica for a test (see Start) and registers Close (plus
// both error log tails on failure) with t.Cleanup. When mariadbd is not installed it fails the
// test with $CI set and skips it otherwise (mariadb.RequireT). It stops the test with t.Fatal
// on any start error.
func StartPair(t testing.TB, o Options) *Pair {
	t.Helper()
	mariadb.RequireT(t)
	p, err := Start(t.Context(), o)
	if err != nil {
		t.Fatalf("start replicated mariadb pair: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replication pair log tails:\n%s", p.LogTail(3000))
		}
		if err := p.Close(); err != nil {
			t.Errorf("close replication pair: %v", err)
		}
	})
	return p
}
