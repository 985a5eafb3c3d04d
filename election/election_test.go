package election

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

func TestTimeoutsKeepTheInequality(t *testing.T) {
	for _, c := range []struct{ lease, send time.Duration }{
		{5 * time.Second, 10 * time.Second}, {time.Second, 3 * time.Second}, {1500 * time.Millisecond, 0}, {30 * time.Second, 30 * time.Second},
	} {
		ping, idle := Timeouts(c.lease, c.send)
		if idle <= c.lease+c.send {
			t.Errorf("lease %s send %s: idle %s must exceed lease+send", c.lease, c.send, idle)
		}
		if idle%time.Second != 0 {
			t.Errorf("idle %s is not whole seconds (wait_timeout)", idle)
		}
		if ping > 500*time.Millisecond || ping > c.lease/4 {
			t.Errorf("lease %s: ping %s", c.lease, ping)
		}
	}
	if _, idle := Timeouts(5*time.Second, 10*time.Second); idle != 17*time.Second {
		t.Errorf("defaults: idle %s, want the documented 17s", idle)
	}
}

func openPool(t *testing.T, addr string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "root@tcp("+addr+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newElector(t *testing.T, db *sql.DB, lease, send time.Duration) *Elector {
	t.Helper()
	e, err := New(Config{DB: db, Addr: "test", LockName: "outboxd.t" + NewHolderID()[len(NewHolderID())-6:], Holder: NewHolderID(), Lease: lease, LongestSend: send, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func acquire(t *testing.T, e *Elector, within time.Duration) *Term {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	term, err := e.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire within %s: %v", within, err)
	}
	return term
}

// One holder at a time; a released lock goes to the waiting standby at once.
func TestOneHolderAndHandOver(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	a := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	b := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	b.cfg.LockName = a.cfg.LockName
	ta := acquire(t, a, 5*time.Second)
	got := make(chan *Term, 1)
	go func() {
		tb, err := b.Acquire(t.Context())
		if err == nil {
			got <- tb
		}
	}()
	select {
	case <-got:
		t.Fatal("the standby got the lock while the leader held it")
	case <-time.After(3 * time.Second): // longer than the lease: the leader's pings keep it
	}
	if err := ta.Check(); err != nil {
		t.Fatalf("leader lost its lease while pinging: %v", err)
	}
	released := time.Now()
	ta.Release()
	select {
	case tb := <-got:
		if d := time.Since(released); d > 2500*time.Millisecond {
			t.Errorf("standby took %s to take over a released lock", d)
		}
		tb.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not get the released lock")
	}
	if !errors.Is(ta.Check(), ErrFenced) {
		t.Fatal("a released term still checks")
	}
}

// A lock connection killed on the server fences the holder within a second.
func TestKilledLockConnectionFences(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	db := openPool(t, srv.Addr)
	e := newElector(t, db, 5*time.Second, 10*time.Second)
	term := acquire(t, e, 5*time.Second)
	defer term.Release()
	root := openPool(t, srv.Addr)
	var holder uint64
	if err := root.QueryRow("SELECT IS_USED_LOCK(?)", e.cfg.LockName).Scan(&holder); err != nil || holder != term.ConnID() {
		t.Fatalf("IS_USED_LOCK = %d (%v), term says connection %d", holder, err, term.ConnID())
	}
	killed := time.Now()
	if _, err := root.Exec("KILL ?", term.ConnID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-term.Lost():
		if d := time.Since(killed); d > time.Second {
			t.Errorf("fenced %s after the kill, want within 1s", d)
		}
		if !errors.Is(term.Err(), ErrFenced) || !errors.Is(term.Check(), ErrFenced) {
			t.Errorf("term error %v", term.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no fence after the lock connection was killed")
	}
}

// Cut off without a FIN: the holder fences at the end of its lease, and the server frees the
// lock only after the idle timeout, which is later than lease + longest send.
func TestBlackholedHolderFencesBeforeTheServerFreesTheLock(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	px, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	lease, send := time.Second, time.Second
	a := newElector(t, openPool(t, px.Addr()), lease, send)
	b := newElector(t, openPool(t, srv.Addr), lease, send)
	b.cfg.LockName = a.cfg.LockName
	ta := acquire(t, a, 5*time.Second)
	defer ta.Release()
	time.Sleep(time.Second) // a few proven pings
	cut := time.Now()
	px.SetMode(faultproxy.Blackhole)
	var fencedAt time.Time
	select {
	case <-ta.Lost():
		fencedAt = time.Now()
	case <-time.After(3 * lease):
		t.Fatal("the cut-off holder did not fence")
	}
	if d := fencedAt.Sub(cut); d > lease+200*time.Millisecond {
		t.Errorf("fenced %s after the cut, want within the lease %s", d, lease)
	}
	tb := acquire(t, b, 20*time.Second)
	defer tb.Release()
	took := time.Since(cut)
	_, idle := Timeouts(lease, send)
	if took < lease+send {
		t.Errorf("the standby led %s after the cut, before lease+send %s: the old leader's last send could overlap", took, lease+send)
	}
	if took > idle+acquireWait+2*time.Second {
		t.Errorf("the standby led %s after the cut, later than the bound %s", took, idle+acquireWait)
	}
	t.Logf("fenced after %s, standby led after %s (idle timeout %s)", fencedAt.Sub(cut), took, idle)
}
