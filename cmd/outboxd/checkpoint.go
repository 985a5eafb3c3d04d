package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/startpos"
	"github.com/outboxd/outboxd/tablelayout"
)

// openCLIStore opens the configured checkpoint store once, without the daemon's wait for a
// writer that is away: a command reports that at once.
func openCLIStore(ctx context.Context, cfg *config.Config) (checkpoint.Storage, error) {
	if !cfg.Checkpoint.MySQL() {
		return checkpoint.Open(cfg.Checkpoint.Path)
	}
	conn := server.WriterConn(cfg)
	db, err := server.Open(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.writer_addr: %w", err)
	}
	st, err := checkpoint.OpenMySQL(checkpoint.MySQLConfig{DB: db, Table: cfg.Checkpoint.Table, Name: cfg.Checkpoint.Name, Addr: conn.Addr, Scope: store.Scope(cfg)})
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

// readStore loads the mysql store's row for checkpoint show.
func readStore(ctx context.Context, cfg *config.Config) (*checkpoint.Checkpoint, error) {
	st, err := openCLIStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Load(ctx)
}

// cmdCheckpointMigrate copies a checkpoint file into the mysql store: the one step of moving a
// deployment from checkpoint.path to checkpoint.store: mysql.
func cmdCheckpointMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint migrate", stdout, stderr)
	from := fs.String("from-file", "", "the checkpoint file to copy (the old checkpoint.path; required)")
	overwrite := fs.Bool("overwrite", false, "replace a row that already exists for checkpoint.name")
	force := fs.Bool("force", false, "accept a set that lacks a source the server has")
	ignoreLeader := fs.Bool("ignore-leader", false, "write the row although a leader holds the lock (it is superseded and exits)")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	if *from == "" {
		return &exitError{code: 2, err: errors.New("--from-file is required: the checkpoint file to copy")}
	}
	if !cfg.Checkpoint.MySQL() {
		return &exitError{code: 2, err: errors.New("checkpoint.store is not mysql in this config: migrate copies a file into the mysql store; set checkpoint.store: mysql, checkpoint.table and checkpoint.name")}
	}
	// Holding the file's lock keeps an outboxd that still runs on it from moving it meanwhile.
	file, err := checkpoint.Open(*from)
	if err != nil {
		return err
	}
	defer file.Close()
	cp, err := file.Load(ctx)
	if err != nil {
		return err
	}
	if cp == nil {
		return &exitError{code: 1, err: fmt.Errorf("no checkpoint at %s: nothing to migrate", *from)}
	}
	if cp.Flavor != cfg.Source.Flavor {
		return fmt.Errorf("checkpoint %s is for flavor %s but source.flavor is %s", *from, cp.Flavor, cfg.Source.Flavor)
	}
	set, err := cp.Set()
	if err != nil {
		return err
	}
	store, old, err := openStoreToReplace(ctx, cfg, set, *force, *ignoreLeader)
	if err != nil {
		return err
	}
	defer store.Close()
	if old != nil && !*overwrite {
		return fmt.Errorf("checkpoint %s already holds %s: pass --overwrite to replace it with %s from %s",
			cfg.Checkpoint.Where(), old.GTIDSet, cp.GTIDSet, *from)
	}
	if err := replaceCheckpoint(ctx, cfg, store, *cp, "checkpoint migrate"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "checkpoint %s -> %s: %s\n", *from, cfg.Checkpoint.Where(), cp.GTIDSet)
	return nil
}

// openStoreToReplace opens the configured store for checkpoint set and migrate, checks set
// against the source unless force, refuses a mysql store whose leader lock is held unless
// ignoreLeader, and returns the store with the checkpoint it holds now (nil when none). The
// caller closes the store.
func openStoreToReplace(ctx context.Context, cfg *config.Config, set gtid.Set, force, ignoreLeader bool) (checkpoint.Storage, *checkpoint.Checkpoint, error) {
	store, err := openCLIStore(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Checkpoint.MySQL() && !ignoreLeader {
		if err := refuseWhileRunning(ctx, cfg, store); err != nil {
			store.Close()
			return nil, nil, err
		}
	}
	if !force {
		if err := validateAgainstSource(ctx, cfg, set); err != nil {
			store.Close()
			return nil, nil, err
		}
	}
	old, err := store.Load(ctx)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, old, nil
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
		return &exitError{code: 1, err: fmt.Errorf("an outboxd leads on this checkpoint: leader lock %q on %s is held by connection %d; "+
			"stop the outboxd instances first, or pass --ignore-leader to write the position anyway (the leader is then superseded at its next save and exits without saving)",
			cfg.LockName(), conn.Addr, id)}
	}
	return nil
}

// refuseWhileRunning fails when an outboxd runs on the mysql store's checkpoint of cfg: an HA
// leader holds the leader lock, or the row's holder (with or without ha) holds its holder lock.
// Without it a backfill or a position written beside a running outboxd would be interleaved
// with its sends, or superseded by its next save.
func refuseWhileRunning(ctx context.Context, cfg *config.Config, store checkpoint.Storage) error {
	if err := refuseWhileLeading(ctx, cfg); err != nil {
		return err
	}
	hl, ok := store.(checkpoint.HolderLocker)
	if !ok {
		return nil
	}
	holder, id, alive, err := hl.LiveHolder(ctx)
	if err != nil {
		return err
	}
	if alive {
		return &exitError{code: 1, err: fmt.Errorf("an outboxd runs on checkpoint %s: its holder %q holds its lock (connection %d on %s); "+
			"stop that outboxd (every replica of the deployment) first, or pass --ignore-leader to go on anyway (it is then superseded at its next save and exits without saving)",
			cfg.Checkpoint.Where(), holder, id, server.WriterConn(cfg).Addr)}
	}
	return nil
}

// replaceCheckpoint writes cp for an operator, with cfg's scope unless cp has one: the mysql
// store's row is taken over (its epoch bumped) so that an outboxd still running on it cannot
// write over cp; the file is replaced under its lock. Either clears a tombstone.
func replaceCheckpoint(ctx context.Context, cfg *config.Config, st checkpoint.Storage, cp checkpoint.Checkpoint, what string) error {
	if cp.Scope == nil {
		cp.Scope = store.Scope(cfg)
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

// currentLayouts reads the outbox tables' layouts on the source for checkpoint set
// --accept-layout.
func currentLayouts(ctx context.Context, cfg *config.Config) (checkpoint.Layouts, error) {
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return nil, fmt.Errorf("connect to source to read the outbox tables' layouts: %w", err)
	}
	defer db.Close()
	return tablelayout.Current(ctx, db, cfg)
}
