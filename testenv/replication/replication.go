// Package replication starts a throwaway MariaDB primary and a GTID replica of it on loopback,
// for tests of what outboxd does when the database fails over. Both servers are testenv/mariadb
// servers (their datadirs come from its shared template, so a pair starts about as fast as one
// server) with the binlog settings outboxd needs, log_slave_updates (a replica's binlog holds
// what it applied, so outboxd can read from it and a promoted replica's history is complete) and
// gtid_strict_mode, in GTID domain 0 with server ids 1 (first primary) and 2 (first replica).
//
// The replica replicates as root (which has an empty password on loopback) with
// MASTER_USE_GTID=slave_pos. A replica is read_only, which root (and any account with READ_ONLY
// ADMIN) ignores: write to Primary, or connect as an account without that privilege to see
// writes to a replica refused. Promote is a planned switchover; PromoteAfterCrash is the failover
// after the primary died, which may lose the transactions the replica had not received.
package replication

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Server ids of the two servers. A promoted replica keeps GTID domain 0 and writes its own server
// id: after a switchover the new primary's GTIDs read 0-2-N.
const (
	PrimaryServerID = 1
	ReplicaServerID = 2
)

// defaultWait bounds WaitCaughtUp (and the catch-up in Promote) when ctx has no deadline.
const defaultWait = 60 * time.Second

// Options configure Start. The zero value starts the pair with testenv/mariadb's defaults.
type Options struct {
	// ExtraArgs are mariadbd flags for both servers (binlog_expire_logs_seconds, ...), after the
	// built-in ones; the server id and read_only flags come after them.
	ExtraArgs []string
}

// Pair is a primary and its replica. Which server plays which role changes with Promote and
// PromoteAfterCrash. Methods are safe for concurrent use; a role change and another method run
// one after the other.
type Pair struct {
	mu      sync.Mutex
	primary *mariadb.Server
	replica *mariadb.Server
	// replicating is false after PromoteAfterCrash: the old primary is dead and nothing follows
	// the new one until Rejoin.
	replicating bool
	servers     [2]*mariadb.Server // for Close, in start order
	args        [2][]string        // each server's flags, for a restart
	nextID      int                // the server id Rebuild gives next (0: ReplicaServerID + 1)
}

// Start starts both servers at once and makes the second a GTID replica of the first. It blocks
// until the replica's replication threads run (or ctx ends or mariadb.StartTimeout passes). On
// error no server is left running.
func Start(ctx context.Context, o Options) (*Pair, error) {
	var (
		wg   sync.WaitGroup
		srv  [2]*mariadb.Server
		errs [2]error
	)
	var args [2][]string
	for i, id := range []int{PrimaryServerID, ReplicaServerID} {
		args[i] = append(append([]string(nil), o.ExtraArgs...), fmt.Sprintf("--server-id=%d", id),
			// A fixed relay log name: the default one derives from the host name.
			"--relay-log=relay-bin", "--relay-log-index=relay-bin.index")
		wg.Go(func() {
			// The replica starts read-only; a restart (Rejoin) sets read_only again itself.
			a := args[i]
			if id == ReplicaServerID {
				a = append(a[:len(a):len(a)], "--read-only=1")
			}
			srv[i], errs[i] = mariadb.Start(ctx, mariadb.Options{ExtraArgs: a})
		})
	}
	wg.Wait()
	p := &Pair{primary: srv[0], replica: srv[1], servers: srv, args: args}
	if err := errors.Join(errs[:]...); err != nil {
		p.Close()
		return nil, err
	}
	if err := follow(ctx, p.replica, p.primary, false); err != nil {
		p.Close()
		return nil, err
	}
	p.replicating = true
	return p, nil
}

// Primary returns the server that takes writes now. Safe for concurrent use.
func (p *Pair) Primary() *mariadb.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.primary
}

// Replica returns the other server: the replica, or after PromoteAfterCrash the dead old primary
// (until Rejoin). Safe for concurrent use.
func (p *Pair) Replica() *mariadb.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replica
}

// WaitCaughtUp blocks until the replica applied every transaction in the primary's binlog when
// called (MASTER_GTID_WAIT of the primary's @@gtid_binlog_pos), ctx ends, or 60 s pass when ctx
// has no deadline. It fails at once with the replica's error when replication stopped, and
// when nothing replicates (after PromoteAfterCrash, before Rejoin).
func (p *Pair) WaitCaughtUp(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.replicating {
		return errors.New("replication: nothing replicates from the primary (promoted after a crash; Rejoin the old primary first)")
	}
	return waitCaughtUp(ctx, p.replica, p.primary)
}

// Promote is a planned switchover: the caller has stopped writing. It waits until the replica
// applied everything, stops its replication and clears its replica settings (STOP SLAVE,
// RESET SLAVE ALL), makes it writable, and makes the old primary a read-only replica of it
// (from the old primary's own binlog position: it has exactly the new primary's history). When
// it returns nil, Primary is the new primary. On error the roles are unchanged unless the new
// primary already took writes (the error says which step failed).
func (p *Pair) Promote(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.replicating {
		return errors.New("replication: promote: nothing replicates (promoted after a crash; Rejoin first)")
	}
	old, next := p.primary, p.replica
	if old.Running() {
		// The old primary must not take writes any more, and the wait below must see all of
		// them: read_only first.
		if err := exec(ctx, old, "SET GLOBAL read_only = 1"); err != nil {
			return fmt.Errorf("replication: promote: old primary %s read-only: %w", old.Addr, err)
		}
		if err := waitCaughtUp(ctx, next, old); err != nil {
			return fmt.Errorf("replication: promote: %w", err)
		}
	}
	if err := makePrimary(ctx, next); err != nil {
		return err
	}
	p.primary, p.replica = next, old
	p.replicating = false
	if !old.Running() {
		return nil
	}
	if err := follow(ctx, old, next, true); err != nil {
		return fmt.Errorf("replication: promote: %s is the primary now, but the old primary does not follow it: %w", next.Addr, err)
	}
	p.replicating = true
	return nil
}

// PromoteAfterCrash is the failover after the primary died: it kills the primary when it still
// runs (kill -9: whatever it had not sent is lost to the replica), stops the replica's
// replication, clears its replica settings and makes it writable, without waiting for
// anything. The new primary's history may lack the old primary's last transactions. Nothing
// follows the new primary until Rejoin. When it returns nil, Primary is the new primary.
func (p *Pair) PromoteAfterCrash(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.primary.Kill(); err != nil {
		return fmt.Errorf("replication: kill primary %s: %w", p.primary.Addr, err)
	}
	if err := makePrimary(ctx, p.replica); err != nil {
		return err
	}
	p.primary, p.replica = p.replica, p.primary
	p.replicating = false
	return nil
}

// Rejoin restarts the old primary after PromoteAfterCrash (or a stopped replica) and makes it a
// read-only replica of the primary from its own binlog position. It fails when the old primary
// has transactions the new one lacks (a diverged history: gtid_strict_mode refuses it, and the
// error is the replica's); the server then runs but does not replicate. It blocks until the
// replica has caught up with the primary.
func (p *Pair) Rejoin(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.replica
	if !r.Running() {
		if err := r.Restart(ctx, mariadb.Options{ExtraArgs: p.argsOf(r)}); err != nil {
			return fmt.Errorf("replication: rejoin: restart %s: %w", r.Addr, err)
		}
	}
	if err := follow(ctx, r, p.primary, true); err != nil {
		return fmt.Errorf("replication: rejoin %s: %w", r.Addr, err)
	}
	// Running threads do not prove the primary took the position: a diverged history is
	// refused (ERROR 1236) only once the IO thread asks for it. Catching up proves it.
	if err := waitCaughtUp(ctx, r, p.primary); err != nil {
		return fmt.Errorf("replication: rejoin %s: %w", r.Addr, err)
	}
	p.replicating = true
	return nil
}

// argsOf returns the flags s was started with.
func (p *Pair) argsOf(s *mariadb.Server) []string { return p.args[p.index(s)] }

// index is s's place in p.servers (start order).
func (p *Pair) index(s *mariadb.Server) int {
	if s == p.servers[0] {
		return 0
	}
	return 1
}

// Close stops both servers and removes their directories. It blocks until both exited.
func (p *Pair) Close() error {
	var errs []error
	for _, s := range p.servers {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// LogTail returns the end of both servers' error logs, for failure reports.
func (p *Pair) LogTail(n int) string {
	var b strings.Builder
	for i, s := range p.servers {
		if s != nil {
			fmt.Fprintf(&b, "--- server %d (%s):\n%s\n", i+1, s.Addr, s.LogTail(n))
		}
	}
	return b.String()
}

// makePrimary stops s's replication, forgets its primary and makes it writable.
func makePrimary(ctx context.Context, s *mariadb.Server) error {
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if err := exec(ctx, s, q); err != nil {
			return fmt.Errorf("replication: promote %s: %s: %w", s.Addr, q, err)
		}
	}
	return nil
}

// follow makes replica replicate from primary by GTID and waits until both replication threads
// run. fromOwnBinlog starts from the replica's own binlog position (a former primary, or a
// server that was promoted and demoted: it has logged everything it executed, and its
// gtid_slave_pos may be older or empty); otherwise from its gtid_slave_pos (a fresh replica).
func follow(ctx context.Context, replica, primary *mariadb.Server, fromOwnBinlog bool) error {
	qs := []string{"STOP SLAVE", "SET GLOBAL read_only = 1"}
	if fromOwnBinlog {
		qs = append(qs, "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_binlog_pos")
	}
	qs = append(qs,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_PASSWORD = '', "+
			"MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, MASTER_HEARTBEAT_PERIOD = 1", primary.Port),
		"START SLAVE")
	for _, q := range qs {
		if err := exec(ctx, replica, q); err != nil {
			return fmt.Errorf("replica %s of %s: %s: %w", replica.Addr, primary.Addr, q, err)
		}
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		st, err := slaveStatus(ctx, replica)
		if err != nil {
			return err
		}
		if err := st.failed(); err != nil {
			return fmt.Errorf("replica %s of %s: %w", replica.Addr, primary.Addr, err)
		}
		if st["Slave_IO_Running"] == "Yes" && st["Slave_SQL_Running"] == "Yes" {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("replica %s of %s: replication threads not running (IO %s, SQL %s): %w",
				replica.Addr, primary.Addr, st["Slave_IO_Running"], st["Slave_SQL_Running"], err)
		}
	}
}

// waitCaughtUp waits until replica applied primary's @@gtid_binlog_pos as of now.
func waitCaughtUp(ctx context.Context, replica, primary *mariadb.Server) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	pos, err := query1(ctx, primary, "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		return fmt.Errorf("primary %s: %w", primary.Addr, err)
	}
	if pos == "" {
		return nil
	}
	for {
		// One second at a time, so a replication that broke is reported, not waited out.
		r, err := query1(ctx, replica, "SELECT MASTER_GTID_WAIT("+quote(pos)+", 1)")
		if err != nil {
			return fmt.Errorf("replica %s: wait for %s: %w", replica.Addr, pos, err)
		}
		if r == "0" {
			// MASTER_GTID_WAIT compares sequence numbers per domain: a diverged replica whose
			// own transaction holds the same number (0-2-N where the primary wrote 0-1-N) passes
			// it before its IO thread is refused. Caught up means it holds the primary's GTIDs.
			ok, err := holds(ctx, replica, pos)
			if err != nil || ok {
				return err
			}
		}
		st, err := slaveStatus(ctx, replica)
		if err != nil {
			return err
		}
		if err := st.failed(); err != nil {
			return fmt.Errorf("replica %s waiting for %s of %s: %w", replica.Addr, pos, primary.Addr, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("replica %s: not caught up with %s (primary %s) after waiting: gtid_slave_pos %s: %w",
				replica.Addr, pos, primary.Addr, st["Gtid_Slave_Pos"], ctx.Err())
		}
	}
}

// holds reports whether replica's binlog (log_slave_updates) holds every GTID of pos, by
// domain and server id: a later sequence number of another server is not the primary's.
func holds(ctx context.Context, replica *mariadb.Server, pos string) (bool, error) {
	want, err := gtid.Parse(gtid.MariaDB, pos)
	if err != nil {
		return false, fmt.Errorf("primary position %q: %w", pos, err)
	}
	text, err := query1(ctx, replica, "SELECT @@GLOBAL.gtid_binlog_state")
	if err != nil {
		return false, fmt.Errorf("replica %s: %w", replica.Addr, err)
	}
	state, err := gtid.ParseBinlogState(text)
	if err != nil {
		return false, fmt.Errorf("replica %s: gtid_binlog_state: %w", replica.Addr, err)
	}
	for _, p := range want.Positions() {
		if seq, ok := state.Last(p.Domain, p.Server); !ok || seq < p.Seq {
			return false, nil
		}
	}
	return true, nil
}

type status map[string]string

// failed returns the replication error SHOW SLAVE STATUS reports, if any.
func (s status) failed() error {
	var msgs []string
	for _, k := range []string{"Last_IO_Error", "Last_SQL_Error"} {
		if s[k] != "" {
			msgs = append(msgs, k+": "+s[k])
		}
	}
	if msgs == nil {
		return nil
	}
	return errors.New("replication failed: " + strings.Join(msgs, "; "))
}

func slaveStatus(ctx context.Context, s *mariadb.Server) (status, error) {
	db, err := s.DB(ctx, "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, fmt.Errorf("%s: SHOW SLAVE STATUS: %w", s.Addr, err)
	}
	all, err := server.ScanAll(rows)
	if err != nil || len(all) == 0 {
		return status{}, err
	}
	return status(all[0]), nil
}

func exec(ctx context.Context, s *mariadb.Server, q string) error {
	db, err := s.DB(ctx, "")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, q)
	return err
}

func query1(ctx context.Context, s *mariadb.Server, q string) (string, error) {
	db, err := s.DB(ctx, "")
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v sql.NullString
	if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return "", fmt.Errorf("%s: %w", q, err)
	}
	return v.String, nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultWait)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
