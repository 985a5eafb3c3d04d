package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

func TestScopeDiff(t *testing.T) {
	s := NewScope("mariadb://db:3306", []string{"shop.b", "shop.a", "shop.a"})
	if !slices.Equal(s.Tables, []string{"shop.a", "shop.b"}) {
		t.Fatalf("tables %v, want sorted and deduplicated", s.Tables)
	}
	for _, c := range []struct {
		want           []string
		added, removed []string
	}{
		{[]string{"shop.b", "shop.a"}, nil, nil},
		{[]string{"shop.a", "shop.b", "shop.c"}, []string{"shop.c"}, nil},
		{[]string{"shop.a"}, nil, []string{"shop.b"}},
		{[]string{"shop.c", "shop.a"}, []string{"shop.c"}, []string{"shop.b"}},
	} {
		added, removed := s.Diff(c.want)
		if !slices.Equal(added, c.added) || !slices.Equal(removed, c.removed) {
			t.Errorf("Diff(%v) = +%v -%v, want +%v -%v", c.want, added, removed, c.added, c.removed)
		}
	}
}

func TestCheckScope(t *testing.T) {
	tables := []string{"shop.a"}
	if err := CheckScope("x", nil, tables); err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	old := &Checkpoint{Flavor: "mariadb", GTIDSet: "0-1-5"}
	if err := CheckScope("x", old, tables); err != nil {
		t.Fatalf("a checkpoint without a scope is adopted: %v", err)
	}
	same := *old
	same.Scope = NewScope("elsewhere", tables) // the source is for diagnostics only
	if err := CheckScope("x", &same, tables); err != nil {
		t.Fatalf("same tables: %v", err)
	}
	other := *old
	other.Scope = NewScope("", []string{"shop.b"})
	err := CheckScope("ck", &other, tables)
	if !errors.Is(err, ErrScopeMismatch) || !errors.Is(err, ErrStoreMisconfigured) ||
		!strings.Contains(err.Error(), "tables added: shop.a") || !strings.Contains(err.Error(), "tables removed: shop.b") ||
		!strings.Contains(err.Error(), "--from-checkpoint") {
		t.Fatalf("other tables: %v", err)
	}
	lost := Tombstone(same, "holder-a", "the row was deleted", time.Unix(0, 0))
	if same.Scope.Lost != nil {
		t.Fatal("Tombstone changed its argument's scope")
	}
	err = CheckScope("ck", &lost, tables)
	if !errors.Is(err, ErrCheckpointLost) || !strings.Contains(err.Error(), "--gtid '0-1-5'") {
		t.Fatalf("tombstone: %v", err)
	}
}

func TestHolderLockName(t *testing.T) {
	a := HolderLockName("outboxd.checkpoint", "orders", "host-1-abcdef")
	if len(a) > 64 || !strings.HasPrefix(a, "outboxd.holder.") {
		t.Fatalf("%q (%d characters)", a, len(a))
	}
	long := strings.Repeat("x", 200)
	if n := HolderLockName(long, long, long); len(n) > 64 {
		t.Fatalf("long inputs: %d characters", len(n))
	}
	for _, b := range []string{
		HolderLockName("outboxd.checkpoint", "orders", "host-1-abcdee"),
		HolderLockName("outboxd.checkpoint", "orders2", "host-1-abcdef"),
		HolderLockName("outboxd.checkpoint2", "orders", "host-1-abcdef"),
	} {
		if a == b {
			t.Fatalf("distinct holders share %q", a)
		}
	}
}

// Issue 21 item 7 on the file store: a checkpoint file removed while a Store that had read or
// written it is open is not silently recreated by the next Save (which would hide the loss),
// nor left missing at Close (the next start would take source.start): both write the last
// known position as a tombstone, which every later start refuses.
func TestFileRemovedWhileOpenBecomesTombstone(t *testing.T) {
	scope := NewScope("mariadb://db", []string{"s.outbox"})
	c1 := Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5", Scope: scope}
	c2 := Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-7", Scope: scope}

	t.Run("save", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp.json")
		s := openT(t, path)
		if err := s.Save(t.Context(), c1); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		err := s.Save(t.Context(), c2)
		if !errors.Is(err, ErrCheckpointLost) || !strings.Contains(err.Error(), "0-1-7") {
			t.Fatalf("Save after the file was removed: %v, want ErrCheckpointLost naming 0-1-7", err)
		}
		got, err := Read(path)
		if err != nil || got == nil || got.GTIDSet != "0-1-7" || got.Scope == nil || got.Scope.Lost == nil {
			t.Fatalf("file after the refused save: %+v, %v; want the tombstone of 0-1-7", got, err)
		}
		if err := CheckScope(path, got, scope.Tables); !errors.Is(err, ErrCheckpointLost) {
			t.Fatalf("a start on the tombstone: %v, want ErrCheckpointLost", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp.json")
		s := openT(t, path)
		if err := s.Save(t.Context(), c1); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = openT(t, path)
		if got, err := s.Load(t.Context()); err != nil || got == nil {
			t.Fatalf("Load: %v, %v", got, err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); !errors.Is(err, ErrCheckpointLost) {
			t.Fatalf("Close after the file was removed: %v, want ErrCheckpointLost", err)
		}
		got, err := Read(path)
		if err != nil || got == nil || got.GTIDSet != "0-1-5" || got.Scope == nil || got.Scope.Lost == nil {
			t.Fatalf("file after Close: %+v, %v; want the tombstone of 0-1-5", got, err)
		}
	})
	t.Run("never had one", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp.json")
		s := openT(t, path)
		if got, err := s.Load(t.Context()); err != nil || got != nil {
			t.Fatalf("Load: %v, %v", got, err)
		}
		if err := s.Save(t.Context(), c1); err != nil {
			t.Fatalf("first Save: %v", err)
		}
	})
}
