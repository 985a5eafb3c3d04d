package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/startpos"
)

// The policy of the commands that replace a checkpoint an operator names (checkpoint set and
// migrate, backfill): open the store once, refuse while an outboxd runs on it, check the new
// position against the source, and take the row over so a still running outboxd cannot write
// over it.

// ErrRunning is what the errors of RefuseWhileRunning and OpenToReplace match (errors.Is) when
// an outboxd runs on the checkpoint: stop it first, or pass --ignore-leader.
var ErrRunning = errors.New("an outboxd runs on this checkpoint")

// runningError is an ErrRunning with its own message, which names the lock and its holder.
type runningError string

func (e runningError) Error() string      { return string(e) }
func (runningError) Is(target error) bool { return target == ErrRunning }

// OpenOnce opens the configured checkpoint store once, without Open's wait for a writer that is
// away: a command reports that at once. It blocks for one connection attempt; the caller closes
// the store.
func OpenOnce(ctx context.Context, cfg *config.Config) (checkpoint.Storage, error) {
	if cfg.Checkpoint.Kafka() {
		return openKafka(cfg, zerolog.Nop())
	}
	if !cfg.Checkpoint.MySQL() {
		return checkpoint.Open(cfg.Checkpoint.Path)
	}
	conn := server.WriterConn(cfg)
	db, err := server.Open(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.writer_addr: %w", err)
	}
	return openMySQL(cfg, conn, db)
}

// ReplaceOptions are the operator's overrides of OpenToReplace's checks.
type ReplaceOptions struct {
	Force        bool // skip the check of the new position against the source
	IgnoreLeader bool // write although an outboxd runs on the mysql store's row
}

// OpenToReplace opens the configured store for checkpoint set and migrate, checks set against
// the source unless opts.Force, refuses a mysql store an outboxd runs on (ErrRunning) unless
// opts.IgnoreLeader, and returns the store with the checkpoint it holds now (nil when none).
// It blocks on the connections to the writer and the source; on an error the store is closed,
// else the caller closes it.
func OpenToReplace(ctx context.Context, cfg *config.Config, set gtid.Set, opts ReplaceOptions) (checkpoint.Storage, *checkpoint.Checkpoint, error) {
	st, err := OpenOnce(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if !opts.IgnoreLeader {
		if err := RefuseWhileRunning(ctx, cfg, st); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	if !opts.Force {
		if err := validateAgainstSource(ctx, cfg, set); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	old, err := st.Load(ctx)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, old, nil
}

// refuseWhileLeading fails when an outboxd holds the leader lock of cfg: a position written
// under a running leader would be overwritten by its next save, or (the row's epoch moves)
// stop it.
func refuseWhileLeading(ctx context.Context, cfg *config.Config) error {
	conn := server.WriterConn(cfg)
	db, err := server.Open(ctx, conn)
	if err != nil {
		return fmt.Errorf("checkpoint.writer_addr %s: check the leader lock: %w", conn.Addr, err)
	}
	defer db.Close()
	id, held, err := election.LockHolder(ctx, db, cfg.LockName())
	if err != nil {
		return fmt.Errorf("checkpoint.writer_addr %s: %w", conn.Addr, err)
	}
	if held {
		return runningError(fmt.Sprintf("an outboxd leads on this checkpoint: leader lock %q on %s is held by connection %d; "+
			"stop the outboxd instances first, or pass --ignore-leader to write the position anyway (the leader is then superseded at its next save and exits without saving)",
			cfg.LockName(), conn.Addr, id))
	}
	return nil
}

// RefuseWhileRunning fails with ErrRunning when an outboxd runs on the mysql store's
// checkpoint of cfg: an HA leader holds the leader lock, or the row's holder (with or without
// ha) holds its holder lock. Without it a backfill or a position written beside a running
// outboxd would be interleaved with its sends, or superseded by its next save. A checkpoint
// file needs no check: st holds its lock. The kafka store with ha is checked by the leader
// lock on checkpoint.writer_addr; without ha nothing shows that an outboxd runs on it (the
// broker keeps the transactional id's producer, not a lock of a live process), so nothing is
// refused: the command's own write of the checkpoint then fences such an outboxd, which stops
// at its next send or commit without making anything of its open transaction visible. It
// blocks on a connection to the writer.
func RefuseWhileRunning(ctx context.Context, cfg *config.Config, st checkpoint.Storage) error {
	if cfg.Checkpoint.Kafka() {
		if !cfg.HA.Enabled {
			return nil
		}
		return refuseWhileLeading(ctx, cfg)
	}
	if !cfg.Checkpoint.MySQL() {
		return nil
	}
	if err := refuseWhileLeading(ctx, cfg); err != nil {
		return err
	}
	hl, ok := st.(checkpoint.HolderLocker)
	if !ok {
		return nil
	}
	holder, id, alive, err := hl.LiveHolder(ctx)
	if err != nil {
		return err
	}
	if alive {
		return runningError(fmt.Sprintf("an outboxd runs on checkpoint %s: its holder %q holds its lock (connection %d on %s); "+
			"stop that outboxd (every replica of the deployment) first, or pass --ignore-leader to go on anyway (it is then superseded at its next save and exits without saving)",
			cfg.Checkpoint.Where(), holder, id, server.WriterConn(cfg).Addr))
	}
	return nil
}

// Replace writes cp for an operator (what names the command, for the row's holder), with cfg's
// scope unless cp has one: the mysql store's row is taken over (its epoch bumped) so that an
// outboxd still running on it cannot write over cp; the file is replaced under its lock.
// Either clears a tombstone. It blocks on the write; on an error the old checkpoint stays.
func Replace(ctx context.Context, cfg *config.Config, st checkpoint.Storage, cp checkpoint.Checkpoint, what string) error {
	if cp.Scope == nil {
		cp.Scope = Scope(cfg)
	}
	if o, ok := st.(checkpoint.Overwriter); ok {
		return o.Overwrite(ctx, cp, "outboxd "+what+" "+election.NewHolderID())
	}
	return st.Save(ctx, cp)
}

// validateAgainstSource checks a set as checkpoint set does before it is written.
func validateAgainstSource(ctx context.Context, cfg *config.Config, set gtid.Set) error {
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return fmt.Errorf("connect to source to validate the checkpoint (pass --force to skip): %w", err)
	}
	defer db.Close()
	return startpos.Validate(ctx, startpos.SQL{DB: db}, cfg, set, startpos.OriginCheckpointSet, false)
}
