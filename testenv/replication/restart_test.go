package replication

import (
	"testing"
)

// A primary restarted after a kill -9 comes back with its own server id and writable, and the
// replica reconnects by itself and replicates what it writes afterwards.
func TestRestartPrimaryKeepsServerID(t *testing.T) {
	p := StartPair(t, Options{})
	ctx := ctxT(t)
	prim := p.Primary()
	mustExec(t, open(t, prim), "CREATE DATABASE r")
	if err := prim.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, prim); err != nil {
		t.Fatal(err)
	}
	db := open(t, prim)
	if id := q1(t, db, "SELECT @@server_id"); id != "1" {
		t.Fatalf("restarted primary has server_id %s, want 1", id)
	}
	mustExec(t, db, "CREATE TABLE r.t (id INT PRIMARY KEY)")
	mustExec(t, db, "INSERT INTO r.t VALUES (7)")
	seq(t, q1(t, db, "SELECT @@gtid_binlog_pos"), PrimaryServerID)
	if err := p.WaitCaughtUp(ctx); err != nil {
		t.Fatalf("the replica did not catch up with the restarted primary: %v", err)
	}
	if got := q1(t, open(t, p.Replica()), "SELECT COUNT(*) FROM r.t"); got != "1" {
		t.Fatalf("replica has %s rows of r.t, want 1", got)
	}
}
