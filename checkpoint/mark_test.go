package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The file store keeps the reconcile mark beside the checkpoint, written atomically: none
// before the first save, the saved instant after, a corrupt file an error naming it.
func TestReconcileMarkFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openT(t, path)
	ctx := context.Background()
	if _, ok, err := s.LoadMark(ctx); ok || err != nil {
		t.Fatalf("before a save: %v, %v", ok, err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	if err := s.SaveMark(ctx, at); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.LoadMark(ctx)
	if !ok || err != nil || !got.Equal(at) {
		t.Fatalf("loaded %s %v %v, want %s", got, ok, err, at)
	}
	if c, err := s.Load(t.Context()); c != nil || err != nil {
		t.Fatalf("the mark is not a checkpoint: %v %v", c, err)
	}
	if err := os.WriteFile(MarkPath(path), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LoadMark(ctx); err == nil || !strings.Contains(err.Error(), MarkPath(path)) {
		t.Fatalf("corrupt mark: %v", err)
	}
}

// The mysql store's mark is fenced like Save: a superseded holder cannot move it; a table
// made before the column gets the ALTER that adds it.
func TestReconcileMarkMySQLFenced(t *testing.T) {
	st, exec := fenceStores(t, 2)
	a, b := st[0], st[1]
	ctx := context.Background()
	if _, err := a.Claim(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.LoadMark(ctx); ok || err != nil {
		t.Fatalf("before a save: %v, %v", ok, err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)
	if err := a.SaveMark(ctx, at); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveMark(ctx, at); err != nil {
		t.Fatalf("the same mark again: %v", err)
	}
	if _, err := b.Claim(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveMark(ctx, at.Add(time.Hour)); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("deposed holder's SaveMark: %v, want ErrSuperseded", err)
	}
	got, ok, err := b.LoadMark(ctx)
	if !ok || err != nil || !got.Equal(at) {
		t.Fatalf("mark %s %v %v, want %s", got, ok, err, at)
	}
	exec("ALTER TABLE outboxd.checkpoint DROP COLUMN " + MarkColumn)
	_, _, err = b.LoadMark(ctx)
	if !errors.Is(err, ErrStoreMisconfigured) || !strings.Contains(err.Error(), AddColumnSQL("outboxd.checkpoint", MarkColumn)) {
		t.Fatalf("without the column: %v", err)
	}
	exec(AddColumnSQL("outboxd.checkpoint", MarkColumn))
	if _, ok, err := b.LoadMark(ctx); ok || err != nil {
		t.Fatalf("after the ALTER: %v, %v", ok, err)
	}
}
