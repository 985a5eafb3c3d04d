package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Rebuild is what a DBA does with the old primary after PromoteAfterCrash when its history
// diverged (Rejoin refuses it): throw its data away and make it a new replica of the primary.
// The server keeps its address but starts from an empty datadir with a new server id (3, then 4,
// ...: a fresh replica with the old id would skip the events that id wrote, as replicas skip
// their own), and replicates the primary's whole binlog from its start (an empty gtid_slave_pos),
// so its own binlog (log_slave_updates) holds the same history as the primary's: a full source
// candidate again. It needs every binlog of the primary (none purged). It returns once the
// replication threads run; WaitCaughtUp waits for the copy to finish. What only the old primary
// had is gone: read it first (Restart the dead server, query it) if it matters.
func (p *Pair) Rebuild(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.replica
	i := p.index(r)
	if p.nextID == 0 {
		p.nextID = ReplicaServerID + 1
	}
	id := p.nextID
	p.nextID++
	args := make([]string, 0, len(p.args[i]))
	for _, a := range p.args[i] {
		if !strings.HasPrefix(a, "--server-id=") {
			args = append(args, a)
		}
	}
	p.args[i] = append(args, fmt.Sprintf("--server-id=%d", id))
	if err := r.Reinit(ctx, mariadb.Options{ExtraArgs: append(p.args[i][:len(p.args[i]):len(p.args[i])], "--read-only=1")}); err != nil {
		return fmt.Errorf("replication: rebuild %s: %w", r.Addr, err)
	}
	if err := follow(ctx, r, p.primary, false); err != nil {
		return fmt.Errorf("replication: rebuild %s: %w", r.Addr, err)
	}
	p.replicating = true
	return nil
}

// ServerID is the server id s runs with now (Rebuild gives a new one).
func (p *Pair) ServerID(s *mariadb.Server) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.argsOf(s) {
		if v, ok := strings.CutPrefix(a, "--server-id="); ok {
			return v
		}
	}
	return ""
}

// PauseReplication stops the replica's IO thread: from then on the primary's transactions stay
// on the primary alone (an asynchronous replica that fell behind), until Rejoin or
// PromoteAfterCrash, which then loses them.
func (p *Pair) PauseReplication(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := exec(ctx, p.replica, "STOP SLAVE IO_THREAD"); err != nil {
		return fmt.Errorf("replication: pause %s: %w", p.replica.Addr, err)
	}
	return nil
}
