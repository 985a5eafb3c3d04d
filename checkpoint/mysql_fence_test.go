package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// fenceStores returns n stores on one row of a fresh table, each on a pool of its own (as n
// processes), and a root pool to look at the row.
func fenceStores(t *testing.T, n int) ([]*MySQLStore, func(q string, args ...any)) {
	t.Helper()
	srv := mariadb.StartT(t, mariadb.Options{})
	ctx := t.Context()
	root, err := srv.DB(ctx, "outboxd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	if _, err := root.ExecContext(ctx, CreateTableSQL("outboxd.checkpoint")); err != nil {
		t.Fatal(err)
	}
	stores := make([]*MySQLStore, n)
	for i := range stores {
		// As server.Open opens the daemon's pool: no parseTime (the store reads DATETIME as text).
		db, err := sql.Open("mysql", "root@tcp("+srv.Addr+")/")
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenMySQL(MySQLConfig{DB: db, Table: "outboxd.checkpoint", Name: "orders", Addr: srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := root.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	return stores, exec
}

func cp(set string) Checkpoint {
	return Checkpoint{Flavor: gtid.MariaDB, GTIDSet: set, SavedAt: time.Now().UTC().Truncate(time.Microsecond)}
}

func loadSet(t *testing.T, s *MySQLStore) string {
	t.Helper()
	c, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return "<none>"
	}
	return c.GTIDSet
}

func token(t *testing.T, s *MySQLStore) (uint64, string) {
	t.Helper()
	epoch, holder, found, err := s.Token(context.Background())
	if err != nil || !found {
		t.Fatalf("token: found %v, %v", found, err)
	}
	return epoch, holder
}

// Claim creates the row with no position (loaded as no checkpoint) and makes the claimer its
// only writer; a later claim supersedes it: the old holder's Save changes nothing and wraps
// ErrSuperseded, however late it comes.
func TestMySQLClaimFencesTheOlderHolder(t *testing.T) {
	st, _ := fenceStores(t, 2)
	a, b := st[0], st[1]
	if got := loadSet(t, a); got != "<none>" {
		t.Fatalf("no row: Load = %s", got)
	}
	ea, err := a.Claim(t.Context(), "holder-a")
	if err != nil || ea != 1 {
		t.Fatalf("first claim: epoch %d, %v; want 1", ea, err)
	}
	if got := loadSet(t, a); got != "<none>" {
		t.Fatalf("a claimed row without a position loads as %s, want no checkpoint", got)
	}
	if err := a.Save(t.Context(), cp("0-1-5")); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(t.Context(), cp("0-1-5")); err != nil { // no row changed: still ours, not an error
		t.Fatalf("saving the same position again: %v", err)
	}
	eb, err := b.Claim(t.Context(), "holder-b")
	if err != nil || eb != 2 {
		t.Fatalf("second claim: epoch %d, %v; want 2", eb, err)
	}
	if got := loadSet(t, b); got != "0-1-5" {
		t.Fatalf("the new holder loads %s, want the old holder's last save 0-1-5", got)
	}
	err = a.Save(t.Context(), cp("0-1-9"))
	if !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the superseded holder's Save returned %v, want ErrSuperseded", err)
	}
	if got := loadSet(t, b); got != "0-1-5" {
		t.Fatalf("a superseded Save moved the row to %s", got)
	}
	if e, h := token(t, b); e != 2 || h != "holder-b" {
		t.Fatalf("token %d/%s after a superseded save, want 2/holder-b", e, h)
	}
	if err := b.Save(t.Context(), cp("0-1-7")); err != nil {
		t.Fatalf("the current holder's Save: %v", err)
	}
	if got := loadSet(t, a); got != "0-1-7" {
		t.Fatalf("row %s, want 0-1-7", got)
	}
}

// The epoch alone is no token: a failover that lost the last claim can issue the same epoch to
// another process; the holder tells them apart. A deleted row is superseded too.
func TestMySQLSaveNeedsEpochAndHolder(t *testing.T) {
	st, exec := fenceStores(t, 1)
	a := st[0]
	if _, err := a.Claim(t.Context(), "holder-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(t.Context(), cp("0-1-3")); err != nil {
		t.Fatal(err)
	}
	exec("UPDATE checkpoint SET holder = 'holder-x' WHERE name = 'orders'") // same epoch, another holder
	if err := a.Save(t.Context(), cp("0-1-4")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("Save with the epoch matching but not the holder: %v, want ErrSuperseded", err)
	}
	if got := loadSet(t, a); got != "0-1-3" {
		t.Fatalf("row moved to %s", got)
	}
}

// A deleted row is never left for the next process to guess: the holder's save writes a
// tombstone with the position it knew, every claim refuses it, and an operator's Overwrite
// clears it.
func TestMySQLDeletedRowBecomesTombstone(t *testing.T) {
	st, exec := fenceStores(t, 2)
	a, b := st[0], st[1]
	if _, err := a.Claim(t.Context(), "holder-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(t.Context(), cp("0-1-3")); err != nil {
		t.Fatal(err)
	}
	exec("DELETE FROM checkpoint WHERE name = 'orders'")
	err := a.Save(t.Context(), cp("0-1-4"))
	if !errors.Is(err, ErrCheckpointLost) || !strings.Contains(err.Error(), "0-1-4") || !strings.Contains(err.Error(), "checkpoint set") {
		t.Fatalf("Save on a deleted row: %v, want ErrCheckpointLost naming 0-1-4 and checkpoint set", err)
	}
	c, err := b.Load(t.Context())
	if err != nil || c == nil || c.GTIDSet != "0-1-4" || c.Scope == nil || c.Scope.Lost == nil {
		t.Fatalf("row after the lost save: %+v, %v; want a tombstone at 0-1-4", c, err)
	}
	if err := CheckScope("x", c, nil); !errors.Is(err, ErrCheckpointLost) {
		t.Fatalf("CheckScope of the tombstone: %v", err)
	}
	if _, err := b.Claim(t.Context(), "holder-b"); !errors.Is(err, ErrCheckpointLost) || !errors.Is(err, ErrStoreMisconfigured) {
		t.Fatalf("Claim of a tombstone: %v, want ErrCheckpointLost (not retryable)", err)
	}
	if err := b.Overwrite(t.Context(), cp("0-1-4"), "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(t.Context(), "holder-b"); err != nil {
		t.Fatalf("Claim after checkpoint set: %v", err)
	}
}

// A claim refuses a row written for other tables (without touching its token), and the
// holder's lock tells commands that it runs until it closes.
func TestMySQLClaimScopeAndHolderLock(t *testing.T) {
	st, _ := fenceStores(t, 2)
	a, b := st[0], st[1]
	a.cfg.Scope = NewScope("", []string{"shop.outbox_event"})
	b.cfg.Scope = NewScope("", []string{"shop.outbox_b"})
	if _, err := a.Claim(t.Context(), "holder-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(t.Context(), cp("0-1-3")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Claim(t.Context(), "holder-b")
	var se *ScopeError
	if !errors.As(err, &se) || !errors.Is(err, ErrStoreMisconfigured) || !strings.Contains(err.Error(), "tables added: shop.outbox_b") ||
		!strings.Contains(err.Error(), "tables removed: shop.outbox_event") {
		t.Fatalf("Claim of another scope's row: %v", err)
	}
	if e, h := token(t, b); e != 1 || h != "holder-a" {
		t.Fatalf("the refused claim moved the token to %d/%s", e, h)
	}
	holder, id, alive, err := b.LiveHolder(context.Background())
	if err != nil || holder != "holder-a" || !alive || id == 0 {
		t.Fatalf("LiveHolder while a runs: %q %d %v %v", holder, id, alive, err)
	}
	a.Close()
	if _, _, alive, err := b.LiveHolder(context.Background()); err != nil || alive {
		t.Fatalf("LiveHolder after a closed: alive %v, %v", alive, err)
	}
}

// Overwrite (checkpoint set, migrate) writes the position whoever holds the row and bumps the
// epoch, so the running holder cannot write over it.
func TestMySQLOverwriteSupersedesTheHolder(t *testing.T) {
	st, _ := fenceStores(t, 2)
	a, op := st[0], st[1]
	if _, err := a.Claim(t.Context(), "holder-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(t.Context(), cp("0-1-8")); err != nil {
		t.Fatal(err)
	}
	if err := op.Overwrite(t.Context(), cp("0-1-2"), "operator"); err != nil {
		t.Fatal(err)
	}
	if e, h := token(t, op); e != 2 || h != "operator" {
		t.Fatalf("token %d/%s after Overwrite, want 2/operator", e, h)
	}
	if err := a.Save(t.Context(), cp("0-1-9")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the holder's Save after an Overwrite: %v, want ErrSuperseded", err)
	}
	if got := loadSet(t, a); got != "0-1-2" {
		t.Fatalf("row %s, want the operator's 0-1-2", got)
	}
	if e, err := a.Claim(t.Context(), "holder-a2"); err != nil || e != 3 {
		t.Fatalf("claim after Overwrite: %d, %v; want 3", e, err)
	}
	if got := loadSet(t, a); got != "0-1-2" {
		t.Fatalf("a claim changed the position to %s", got)
	}
}

// The layouts round-trip through the row (JSON in a TEXT column), and NULL reads as none.
func TestMySQLStoreLayouts(t *testing.T) {
	stores, _ := fenceStores(t, 1)
	s := stores[0]
	if _, err := s.Claim(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5"}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Load(t.Context()); err != nil || c.Layouts != nil {
		t.Fatalf("Load = %+v, %v; want no layouts", c, err)
	}
	l := Layouts{"app.outbox": {{Name: "id", Type: "bigint(20)"}, {Name: "event_id", Type: "varchar(64)"}}}
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-6", Layouts: l}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Load(t.Context())
	if err != nil || LayoutDiff(c.Layouts["app.outbox"], l["app.outbox"]) != "" || len(c.Layouts) != 1 {
		t.Fatalf("Load = %+v, %v; want layouts %v", c, err, l)
	}
	if err := s.Overwrite(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-7"}, "op"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Load(t.Context()); err != nil || c.Layouts != nil {
		t.Fatalf("after Overwrite without layouts: %+v, %v; want none", c, err)
	}
}

// A save that keeps waiting for the row's lock carries the mysql store's own fix (the lock's
// holder), not the file store's directory, for the caller that gives up on it.
func TestMySQLLockWaitCarriesItsFix(t *testing.T) {
	stores, exec := fenceStores(t, 2)
	a, root := stores[0], stores[1]
	exec("SET GLOBAL innodb_lock_wait_timeout = 1") // the store's connections are opened after this
	if _, err := a.Claim(t.Context(), "holder-a"); err != nil {
		t.Fatal(err)
	}
	tx, err := root.cfg.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(t.Context(), "SELECT epoch FROM outboxd.checkpoint WHERE name = 'orders' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = a.Save(t.Context(), cp("0-1-5"))
	if err == nil || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrStoreMisconfigured) {
		t.Fatalf("Save under a held row lock = %v, want a transient lock wait", err)
	}
	if fix := Fix(err); fix != lockWaitFix {
		t.Fatalf("Fix(%v) = %q, want %q", err, fix, lockWaitFix)
	}
}
