package election

import (
	"testing"
	"time"

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
