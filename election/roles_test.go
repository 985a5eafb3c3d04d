package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// fakeRelay is the relay side of a Roles loop: Claim hands out epochs 1, 2, ...; Lead reports
// each term and waits for its ctx; Superseded answers what the test says.
type fakeRelay struct {
	mu         sync.Mutex
	epoch      uint64
	changes    []string
	causes     []error
	superseded error
	claimHook  func(ctx context.Context) // runs inside Claim, before it returns
	terms      chan *Term
	leadEpochs chan uint64
}

func newFakeRelay() *fakeRelay {
	return &fakeRelay{terms: make(chan *Term, 4), leadEpochs: make(chan uint64, 4)}
}

func (f *fakeRelay) roles(e *Elector, cooldown time.Duration) *Roles {
	return &Roles{
		Elector: e,
		Claim: func(ctx context.Context) (uint64, error) {
			if f.claimHook != nil {
				f.claimHook(ctx)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.epoch++
			return f.epoch, nil
		},
		Lead: func(ctx context.Context, t *Term, epoch uint64) error {
			f.terms <- t
			f.leadEpochs <- epoch
			<-ctx.Done()
			f.mu.Lock()
			f.causes = append(f.causes, context.Cause(ctx))
			f.mu.Unlock()
			if errors.Is(context.Cause(ctx), ErrFenced) {
				return context.Cause(ctx)
			}
			return nil // a shutdown: the relay drained and saved
		},
		Superseded: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.superseded
		},
		Cooldown: cooldown,
		OnChange: func(c Change) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.changes = append(f.changes, fmt.Sprintf("%s/%d", c.Role, c.Epoch))
		},
		Logger: zerolog.Nop(),
	}
}

func (f *fakeRelay) history() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.changes, " ")
}

func waitTerm(t *testing.T, f *fakeRelay, within time.Duration) (*Term, uint64) {
	t.Helper()
	select {
	case term := <-f.terms:
		return term, <-f.leadEpochs
	case <-time.After(within):
		t.Fatalf("no term led within %s (roles: %s)", within, f.history())
		return nil, 0
	}
}

func lockFree(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	_, held, err := LockHolder(context.Background(), db, name)
	if err != nil {
		t.Fatal(err)
	}
	return !held
}

// A fence whose checkpoint row is still this process's: the term's ctx ends with the fence
// as its cause, the loop waits the cooldown, stands by, takes the lock again and leads with the
// next epoch.
func TestRolesFenceThenLeadAgain(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	root := openPool(t, srv.Addr)
	e := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	f := newFakeRelay()
	cooldown := 300 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.roles(e, cooldown).Run(ctx) }()

	term, epoch := waitTerm(t, f, 5*time.Second)
	if epoch != 1 {
		t.Fatalf("first term led with epoch %d, want 1", epoch)
	}
	killed := time.Now()
	if _, err := root.Exec("KILL ?", term.ConnID()); err != nil {
		t.Fatal(err)
	}
	term2, epoch2 := waitTerm(t, f, 5*time.Second)
	if epoch2 != 2 {
		t.Errorf("second term led with epoch %d, want 2", epoch2)
	}
	if d := time.Since(killed); d < cooldown {
		t.Errorf("led again %s after the fence, before the cooldown %s", d, cooldown)
	}
	if term2 == term || term2.Check() != nil {
		t.Errorf("the second term is not a fresh, held term")
	}
	f.mu.Lock()
	cause := f.causes[0]
	f.mu.Unlock()
	if !errors.Is(cause, ErrFenced) {
		t.Errorf("the first term's ctx ended with %v, want a cause wrapping ErrFenced", cause)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after the shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the shutdown")
	}
	if want := "standby/0 leader/1 fenced/1 standby/0 leader/2"; f.history() != want {
		t.Errorf("roles %q, want %q", f.history(), want)
	}
	if !lockFree(t, root, e.LockName()) {
		t.Error("the lock is still held after Run returned")
	}
}

// A fence after which another holder owns the checkpoint ends Run with an error that says
// superseded and wraps checkpoint.ErrSuperseded; the loop does not compete again.
func TestRolesFenceThenSupersededEndsRun(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	root := openPool(t, srv.Addr)
	e := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	f := newFakeRelay()
	f.superseded = fmt.Errorf("row held by someone else: %w", checkpoint.ErrSuperseded)
	done := make(chan error, 1)
	go func() { done <- f.roles(e, 10*time.Millisecond).Run(t.Context()) }()
	term, _ := waitTerm(t, f, 5*time.Second)
	if _, err := root.Exec("KILL ?", term.ConnID()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "superseded") || !errors.Is(err, checkpoint.ErrSuperseded) {
			t.Fatalf("Run returned %v, want an error saying superseded, wrapping checkpoint.ErrSuperseded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after a fence with the row taken over")
	}
	if want := "standby/0 leader/1 fenced/1"; f.history() != want {
		t.Errorf("roles %q, want %q", f.history(), want)
	}
	select {
	case <-f.terms:
		t.Error("led again after being superseded")
	default:
	}
}

// A standby stopped while it waits for the lock returns nil promptly.
func TestRolesShutdownOfAStandby(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	holder := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	ht := acquire(t, holder, 5*time.Second)
	defer ht.Release()
	e := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	e.cfg.LockName = holder.cfg.LockName
	f := newFakeRelay()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.roles(e, time.Second).Run(ctx) }()
	time.Sleep(500 * time.Millisecond) // inside GET_LOCK's wait
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if d := time.Since(stopped); d > 2*time.Second { // GET_LOCK waits 1 s on the server; the driver cancels at once
			t.Errorf("the standby took %s to stop", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not stop")
	}
	if h := f.history(); h != "standby/0" {
		t.Errorf("roles %q, want only standby", h)
	}
}

// A shutdown that comes while the checkpoint is being claimed does not lead: Lead is not
// called, no leader role is announced, and the lock is given back.
func TestRolesShutdownDuringClaim(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	root := openPool(t, srv.Addr)
	e := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	f := newFakeRelay()
	ctx, cancel := context.WithCancel(t.Context())
	f.claimHook = func(context.Context) { cancel() } // the claim itself succeeds (its statements ran before the shutdown)
	done := make(chan error, 1)
	go func() { done <- f.roles(e, time.Second).Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after a shutdown during the claim")
	}
	select {
	case <-f.terms:
		t.Error("led although the shutdown came during the claim")
	default:
	}
	if h := f.history(); strings.Contains(h, "leader") {
		t.Errorf("roles %q: announced leader while shutting down", h)
	}
	if !lockFree(t, root, e.LockName()) {
		t.Error("the lock is still held after Run returned")
	}
}
