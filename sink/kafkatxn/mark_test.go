package kafkatxn

import (
	"testing"
	"time"
)

// The reconcile mark rides on the next commit: it is kept (and reported by the session that
// kept it) until then, becomes readable read_committed by another reader at the commit, is
// lost with an aborted transaction (a later run only re-checks rows), and never moves back.
func TestReconcileMarkCommitsWithTheCheckpoint(t *testing.T) {
	c := cluster(t)
	o := options(c.ListenAddrs(), nil)
	s := open(t, o)
	ctx := testCtx(t)
	reader, err := New(o) // another process: read back only, no fencing
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	loadMark := func(s *Session) (time.Time, bool) {
		t.Helper()
		m, ok, err := s.LoadMark(ctx)
		if err != nil {
			t.Fatalf("LoadMark: %v", err)
		}
		return m, ok
	}
	if _, ok := loadMark(reader); ok {
		t.Fatal("a mark before any was saved")
	}
	if err := reader.SaveMark(ctx, time.Now()); err == nil {
		t.Fatal("SaveMark on a session that did not claim the transactional id succeeded")
	}

	m1 := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)
	if err := s.SaveMark(ctx, m1); err != nil {
		t.Fatal(err)
	}
	if got, ok := loadMark(s); !ok || !got.Equal(m1) {
		t.Fatalf("the saving session's LoadMark = %v %v, want the kept %v", got, ok, m1)
	}
	if _, ok := loadMark(reader); ok {
		t.Fatal("the mark is visible before the commit that carries it")
	}
	if err := s.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, cp(t, 1)); err != nil {
		t.Fatal(err)
	}
	if got, ok := loadMark(reader); !ok || !got.Equal(m1) {
		t.Fatalf("after the commit another reader's LoadMark = %v %v, want %v", got, ok, m1)
	}
	if got := load(t, reader); got == nil || got.GTIDSet != "0-1-1" {
		t.Fatalf("the checkpoint next to the mark = %+v, want 0-1-1", got)
	}

	// An older mark is ignored; a newer one in an aborted transaction is not written by it...
	if err := s.SaveMark(ctx, m1.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	m2 := m1.Add(time.Minute)
	if err := s.SaveMark(ctx, m2); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, msgs("a", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadMark(reader); !got.Equal(m1) {
		t.Fatalf("after an abort the committed mark = %v, want still %v", got, m1)
	}
	// ...and goes with the next commit.
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadMark(reader); !got.Equal(m2) {
		t.Fatalf("after the next commit the mark = %v, want %v", got, m2)
	}
	if got := load(t, reader); got == nil || got.GTIDSet != "0-1-2" {
		t.Fatalf("checkpoint = %+v, want 0-1-2 (the mark record must not be read as the checkpoint)", got)
	}
	// A fresh session (a restart, a takeover) starts from the committed mark.
	s.Close()
	s2 := open(t, o)
	if got, ok := loadMark(s2); !ok || !got.Equal(m2) {
		t.Fatalf("a new holder's LoadMark = %v %v, want %v", got, ok, m2)
	}
}
