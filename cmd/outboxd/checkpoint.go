package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/importpos"
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

// cmdCheckpointImport turns the position Debezium, Maxwell or Canal saved into the checkpoint,
// for moving over from one of them: stop the tool, import, start outboxd.
func cmdCheckpointImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint import", stdout, stderr)
	from := fs.String("from", "", "the tool whose position to import: debezium, maxwell or canal (required)")
	file := fs.String("file", "", "debezium: the offset records (key and value JSON) or the answer of GET /connectors/<name>/offsets; canal: meta.dat or the ZooKeeper cursor node's content")
	connector := fs.String("connector", "", "debezium: the connector's name, when the file holds several connectors' offsets")
	clientID := fs.String("client-id", "", "maxwell: the client_id (default maxwell); canal: the clientId, when meta.dat holds several")
	schema := fs.String("maxwell-schema", "maxwell", "maxwell: the schema_database holding the positions table, read on the source")
	serverID := fs.Int64("server-id", -1, "maxwell: the positions row's server_id, when the client has several (0 is gtid_mode's row)")
	gtidPos := fs.Bool("binlog-gtid-pos", false, "debezium on MariaDB, for an offset without gtids: take the GTID state at its file and pos from the server (BINLOG_GTID_POS)")
	overwrite := fs.Bool("overwrite", false, "replace a checkpoint that already exists")
	force := fs.Bool("force", false, "accept a set that lacks a source the server has")
	ignoreLeader := fs.Bool("ignore-leader", false, "write the row although a leader holds the lock (it is superseded and exits)")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	tool := importpos.Tool(*from)
	switch {
	case tool != importpos.Debezium && tool != importpos.Maxwell && tool != importpos.Canal:
		return &exitError{code: 2, err: fmt.Errorf("--from %q: want debezium, maxwell or canal", *from)}
	case (tool == importpos.Maxwell) != (*file == ""):
		if tool == importpos.Maxwell {
			return &exitError{code: 2, err: errors.New("--file is not used with --from maxwell: its position is read from --maxwell-schema's positions table on the source")}
		}
		return &exitError{code: 2, err: fmt.Errorf("--file is required with --from %s", tool)}
	case *gtidPos && tool != importpos.Debezium:
		return &exitError{code: 2, err: fmt.Errorf("--binlog-gtid-pos is for --from debezium only: %s saves no transaction boundary to look up", tool)}
	}
	pos, err := readForeignPosition(ctx, cfg, tool, *file, *connector, *clientID, *schema, *serverID)
	if err != nil {
		return err
	}
	if *gtidPos && pos.GTIDSet == "" {
		if pos, err = gtidAtOffset(ctx, cfg, pos); err != nil {
			return err
		}
	}
	set, err := pos.Set(cfg.Source.Flavor)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	st, old, err := store.OpenToReplace(ctx, cfg, set, store.ReplaceOptions{Force: *force, IgnoreLeader: *ignoreLeader})
	if err != nil {
		return refusal(err)
	}
	defer st.Close()
	if old != nil && !*overwrite {
		return fmt.Errorf("checkpoint %s already holds %s: pass --overwrite to replace it with %s from %s", cfg.Checkpoint.Where(), old.GTIDSet, set, tool)
	}
	// Layouts at this position are unknown: none are written, and the first start records the
	// current ones with a warning, as after checkpoint set --gtid.
	cp := checkpoint.Checkpoint{Flavor: cfg.Source.Flavor, GTIDSet: set.String(), SavedAt: timeNow()}
	if err := store.Replace(ctx, cfg, st, cp, "checkpoint import"); err != nil {
		return err
	}
	prev := "(none)"
	if old != nil {
		prev = old.GTIDSet
	}
	fmt.Fprintf(stdout, "checkpoint %s: %s -> %s (the %s position %s)\n", cfg.Checkpoint.Where(), prev, cp.GTIDSet, tool, pos.Where)
	if pos.Partial != "" {
		fmt.Fprintf(stdout, "note: %s\n", pos.Partial)
	}
	return nil
}

// readForeignPosition reads the tool's saved position: a file for Debezium and Canal, the
// positions table on the source for Maxwell.
func readForeignPosition(ctx context.Context, cfg *config.Config, tool importpos.Tool, file, connector, clientID, schema string, serverID int64) (importpos.Position, error) {
	if tool == importpos.Maxwell {
		if clientID == "" {
			clientID = "maxwell"
		}
		db, err := server.Open(ctx, server.SourceConn(cfg))
		if err != nil {
			return importpos.Position{}, fmt.Errorf("connect to source to read Maxwell's positions: %w", err)
		}
		defer db.Close()
		return importpos.ReadMaxwell(ctx, db, schema, clientID, serverID)
	}
	f, err := os.Open(file)
	if err != nil {
		return importpos.Position{}, &exitError{code: 2, err: fmt.Errorf("--file: %w", err)}
	}
	defer f.Close()
	if tool == importpos.Debezium {
		return importpos.ReadDebezium(f, connector)
	}
	return importpos.ReadCanal(f, clientID)
}

// gtidAtOffset asks the source for the GTID state at pos's binlog offset (--binlog-gtid-pos).
func gtidAtOffset(ctx context.Context, cfg *config.Config, pos importpos.Position) (importpos.Position, error) {
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return importpos.Position{}, fmt.Errorf("connect to source for --binlog-gtid-pos: %w", err)
	}
	defer db.Close()
	return importpos.FromBinlogOffset(ctx, db, cfg.Source.Flavor, pos)
}
