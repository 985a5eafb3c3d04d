package replication

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Restart restarts s, one of the pair's servers, with the flags it was started with (its server
// id), gracefully or after a Kill. A primary comes back writable; a running replica's threads
// start again by themselves (MariaDB starts the replica at boot) but its read_only is not kept:
// restart a replica with Rejoin instead.
func (p *Pair) Restart(ctx context.Context, s *mariadb.Server) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.Restart(ctx, mariadb.Options{ExtraArgs: p.argsOf(s)}); err != nil {
		return fmt.Errorf("replication: restart %s: %w", s.Addr, err)
	}
	return nil
}
