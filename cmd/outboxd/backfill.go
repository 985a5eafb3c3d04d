package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outboxd/backfill"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/deadletter"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink/sinks"
)

// cmdBackfill wires the backfill: the checkpoint store (held, or its leader lock checked, for the
// whole run), the primary, the sinks, then backfill.Run, then the checkpoint at the snapshot.
func cmdBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("backfill", stdout, stderr)
	var tables stringList
	fs.Var(&tables, "table", "outbox table to backfill, schema.table, one of the config's tables[] (repeatable; all read at one snapshot; required)")
	where := fs.String("where", "", `SQL condition selecting the rows to send, such as "status IN (0, 1)" (default: every row)`)
	batch := fs.Int("batch", backfill.DefaultBatchRows, "rows per page of the read (and per batch handed to the pipeline)")
	dryRun := fs.Bool("dry-run", false, "take the snapshot, print each row that matches (event_id, table, sink, topic, key), the counts and the snapshot's GTID position; send nothing, set nothing")
	overwrite := fs.Bool("overwrite", false, "replace a checkpoint that already exists (see docs/operations/backfill.md: transactions between it and the snapshot are delivered only as far as --where selects their rows)")
	ignoreLeader := fs.Bool("ignore-leader", false, "with checkpoint.store: mysql, go on although an outboxd holds the leader lock (it is superseded and exits)")
	noLock := fs.Bool("no-lock", false, "MySQL: never take FLUSH TABLES WITH READ LOCK: use performance_schema.log_status or fail (before MySQL 8.4 a transaction committing at the snapshot may then be sent twice)")
	var dlEvents stringList
	fs.Var(&dlEvents, "dead-letter-event", "dead-letter the row with this event_id if it is poison or its topic does not exist, even under on_poison: stop, as run's flag does (repeatable; audited)")
	lockWait := fs.Duration("lock-wait", 10*time.Second, "MySQL: the longest wait for FLUSH TABLES WITH READ LOCK (writes queue behind it meanwhile)")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	if len(tables) == 0 {
		return &exitError{code: 2, err: errors.New("--table is required: the outbox table whose rows to send (schema.table)")}
	}
	if *batch <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--batch %d: must be positive", *batch)}
	}
	log := newLogger(cfg.Log, stderr)
	dl, audit, err := deadletter.Override(cfg, dlEvents, log)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// The file's lock, held until the end, keeps an outboxd off the checkpoint meanwhile; the
	// mysql store is guarded by the leader lock and the row holder's lock, checked now and
	// again before the write.
	st, err := store.OpenOnce(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if !*ignoreLeader {
		if err := store.RefuseWhileRunning(ctx, cfg, st); err != nil {
			return refusal(err)
		}
	}
	old, err := st.Load(ctx)
	if err != nil {
		return err
	}
	if old != nil && !*overwrite && !*dryRun {
		return &exitError{code: 1, err: fmt.Errorf("checkpoint %s already holds %s: outboxd has run on it, so the binlog after it is being relayed; "+
			"backfill sets the checkpoint to its snapshot and would skip the transactions in between whose rows --where does not select. "+
			"Pass --overwrite if that is meant (see docs/operations/backfill.md), or point checkpoint.path/name elsewhere", cfg.Checkpoint.Where(), old.GTIDSet)}
	}
	db, err := server.Open(ctx, server.WriterConn(cfg))
	if err != nil {
		return fmt.Errorf("connect to the primary: %w", err)
	}
	defer db.Close()
	bc := backfill.Config{
		Cfg: cfg, DB: db, Tables: tables, Where: *where, BatchRows: *batch, DryRun: *dryRun,
		Snapshot: backfill.SnapshotOptions{LockWait: *lockWait, NoLock: *noLock},
		Logger:   log, DeadLetterEvents: dl, Audit: audit,
	}
	if *dryRun {
		// One line per row, as the help promises, before the counts: tab-separated, so the
		// list can be cut, sorted or counted.
		fmt.Fprintln(stdout, "event_id\ttable\tsink\ttopic\tkey")
		bc.Planned = func(p backfill.Planned) error {
			dest := p.Sink + "\t" + p.Topic
			if p.Poison != "" {
				dest = "-\tpoison: " + p.Poison
			}
			_, err := fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", field(p.EventID), p.Table, dest, field(string(p.Key)))
			return err
		}
	} else {
		opened, err := sinks.Open(cfg, log)
		if err != nil {
			return err
		}
		defer func() {
			for _, s := range opened {
				s.Close()
			}
		}()
		bc.Sinks = opened
	}
	res, err := backfill.Run(ctx, bc)
	if err != nil {
		logFailure(log, err, "backfill failed; the checkpoint was not changed")
		return fmt.Errorf("%w: %w", errReported, err)
	}
	snap := res.Snapshot
	verb := "sent"
	if *dryRun {
		verb = "match"
	}
	for _, t := range tables {
		fmt.Fprintf(stdout, "%s: %d rows %s\n", t, res.Rows[t], verb)
	}
	fmt.Fprintf(stdout, "snapshot: %s (%s)\n", snap.Position, snap.Method)
	if snap.Note != "" {
		fmt.Fprintf(stdout, "note: %s\n", snap.Note)
	}
	if *dryRun {
		return nil
	}
	if !*ignoreLeader {
		if err := store.RefuseWhileRunning(ctx, cfg, st); err != nil {
			return refusal(fmt.Errorf("the rows were sent but the checkpoint was not set: %w", err))
		}
	}
	cp := checkpoint.Checkpoint{Flavor: cfg.Source.Flavor, GTIDSet: snap.Position.String(), SavedAt: timeNow()}
	if err := store.Replace(ctx, cfg, st, cp, "backfill"); err != nil {
		return fmt.Errorf("the rows were sent but the checkpoint was not set: %w", err)
	}
	prev := "(none)"
	if old != nil {
		prev = old.GTIDSet
	}
	fmt.Fprintf(stdout, "checkpoint %s: %s -> %s\n", cfg.Checkpoint.Where(), prev, cp.GTIDSet)
	return nil
}

// field is a value of a dry run's line: as it is when it is printable text without tabs or
// line breaks, else Go-quoted, so one row stays one line of five columns.
func field(v string) string {
	if v == "" {
		return `""`
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(v)
	}
	return v
}
