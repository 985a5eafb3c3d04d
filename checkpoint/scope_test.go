package checkpoint

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
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
