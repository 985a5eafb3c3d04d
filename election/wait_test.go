package election

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// A standby whose GET_LOCK wait is killed on the server (KILL QUERY, or max_statement_time
// shorter than the wait: GET_LOCK then returns NULL, not an error) goes on waiting and takes
// the lock once it is free, instead of ending Acquire (and the daemon) with an error.
func TestStandbySurvivesAKilledWait(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	root := openPool(t, srv.Addr)
	holder := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	ht := acquire(t, holder, 5*time.Second)
	e := newElector(t, openPool(t, srv.Addr), 2*time.Second, time.Second)
	e.cfg.LockName = holder.cfg.LockName
	type result struct {
		t   *Term
		err error
	}
	got := make(chan result, 1)
	go func() {
		term, err := e.Acquire(t.Context())
		got <- result{term, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	killed := 0
	for killed < 2 && time.Now().Before(deadline) {
		var id uint64
		err := root.QueryRow("SELECT id FROM information_schema.processlist WHERE info LIKE 'SELECT GET_LOCK(%' LIMIT 1").Scan(&id)
		if err == nil {
			if _, err := root.Exec("KILL QUERY ?", id); err != nil {
				t.Fatal(err)
			}
			killed++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if killed == 0 {
		t.Fatal("never saw the standby's GET_LOCK wait")
	}
	select {
	case r := <-got:
		t.Fatalf("Acquire returned after its wait was killed (term %v): %v", r.t != nil, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	ht.Release()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		r.t.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not take the released lock")
	}
}

// The lease of a new term counts from when its first proof was sent, not from when its answer
// arrived: the server's idle timer (which frees the lock of a leader cut off) starts when the
// server answered, which is up to a one-way trip before the answer arrives. Counting from the
// arrival would let a leader on a slow link fence later than the inequality assumes.
func TestTermLeaseCountsFromTheProofSent(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	px, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	e := newElector(t, openPool(t, px.Addr()), 5*time.Second, time.Second)
	const oneWay = 300 * time.Millisecond
	px.SetLatency(oneWay)
	term := acquire(t, e, 15*time.Second)
	got := time.Now()
	defer term.Release()
	if d := got.Sub(term.Began()); d < 2*oneWay-50*time.Millisecond {
		t.Errorf("the term's lease starts %s before Acquire returned, want at least the last query's round trip %s", d, 2*oneWay)
	}
	if err := term.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}
