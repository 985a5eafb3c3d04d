package e2e

import (
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
)

// Issue 21 item 5: the holder lock is the only sign commands have that an outboxd without ha
// runs. Its connection can drop while the relay is idle (a KILL, wait_timeout on a connection
// that runs no query, a proxy's idle cut): the relay takes the lock again without waiting for
// a new transaction to save, so checkpoint set goes on refusing beside it.
func TestHolderLockRetakenWhileIdle(t *testing.T) {
	w, table, cfgPath, p, holder := runningOnMySQLStore(t, "idle")
	lock := checkpoint.HolderLockName(table, "idle", holder)
	var id sql.NullInt64
	if err := w.db.QueryRow("SELECT IS_USED_LOCK(?)", lock).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("holder lock %s not held while outboxd runs: %v", lock, err)
	}
	w.exec("KILL CONNECTION " + strconv.FormatInt(id.Int64, 10))

	// No new transaction: the relay has nothing to save. It must hold the lock again anyway
	// (it checks it every few seconds; 30 s is only a bound for a stuck test).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var again sql.NullInt64
		if err := w.db.QueryRow("SELECT IS_USED_LOCK(?)", lock).Scan(&again); err != nil {
			t.Fatal(err)
		}
		if again.Valid && again.Int64 != id.Int64 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder lock was not taken again by the idle outboxd:\n%s", tail(p.output(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	before, _ := storeRow(t, w.db, table, "idle")
	code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", w.position())
	if code != 1 || !strings.Contains(out, "stop that outboxd") {
		t.Fatalf("checkpoint set beside the idle outboxd: exit %d, want 1:\n%s", code, out)
	}
	if after, _ := storeRow(t, w.db, table, "idle"); after != before || !p.running() {
		t.Fatalf("row %s -> %s, running %v", before, after, p.running())
	}
}

// runningOnMySQLStore starts the outboxd binary without ha on a mysql-store checkpoint row
// name, waits until the row covers a first delivered transaction, and returns the world, the
// checkpoint table, the config's path, the process and the row's holder.
func runningOnMySQLStore(t *testing.T, name string) (w *world, table, cfgPath string, p *proc, holder string) {
	t.Helper()
	w = newWorld(t, sharedServer(t))
	c := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, c, "")
	table = useMySQLStore(w, &o, name)
	cfgPath = writeCfg(t, o)
	p = startBinary(t, "run", "--config", cfgPath)
	g := w.commit(row{EventID: "e0", Key: "k", Topic: "orders", Payload: []byte("e0")})
	waitStoreRow(t, w.db, table, name, g, 30*time.Second)
	if err := w.db.QueryRow("SELECT holder FROM "+table+" WHERE name = ?", name).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	return w, table, cfgPath, p, holder
}
