package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/tablelayout"
)

// readStore loads the mysql store's row for checkpoint show.
func readStore(ctx context.Context, cfg *config.Config) (*checkpoint.Checkpoint, error) {
	st, err := store.OpenOnce(ctx, cfg)
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
	st, old, err := store.OpenToReplace(ctx, cfg, set, store.ReplaceOptions{Force: *force, IgnoreLeader: *ignoreLeader})
	if err != nil {
		return refusal(err)
	}
	defer st.Close()
	if old != nil && !*overwrite {
		return fmt.Errorf("checkpoint %s already holds %s: pass --overwrite to replace it with %s from %s",
			cfg.Checkpoint.Where(), old.GTIDSet, cp.GTIDSet, *from)
	}
	if err := store.Replace(ctx, cfg, st, *cp, "checkpoint migrate"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "checkpoint %s -> %s: %s\n", *from, cfg.Checkpoint.Where(), cp.GTIDSet)
	return nil
}

// refusal gives a refusal because an outboxd runs on the checkpoint (store.ErrRunning) exit
// code 1, as every command exits with for it; other errors pass unchanged.
func refusal(err error) error {
	if errors.Is(err, store.ErrRunning) {
		return &exitError{code: 1, err: err}
	}
	return err
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
