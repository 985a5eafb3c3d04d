package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/sink/sinks"
)

// checkpointTableRequest is what check verifies of the mysql store's table.
func checkpointTableRequest(cfg *config.Config) CheckpointTable {
	table := cfg.Checkpoint.Table
	return CheckpointTable{
		Flavor: cfg.Source.Flavor, Name: table, Columns: checkpoint.MySQLColumns,
		CreateTable: checkpoint.CreateTableSQL(table),
		Grant:       func(account string) string { return checkpoint.GrantSQL(table, account) },
		AddColumn:   func(column string) string { return checkpoint.AddColumnSQL(table, column) },
		Skip:        cfg.Source.SkipChecks,
	}
}

// checkStore verifies the mysql checkpoint store on checkpoint.writer_addr: the table, its
// columns and the account's SELECT, INSERT and UPDATE on it. A no-op for the file store.
func checkStore(ctx context.Context, cfg *config.Config, r *Report) {
	if cfg.Checkpoint.Kafka() {
		checkKafkaStore(ctx, cfg, r)
		return
	}
	if !cfg.Checkpoint.MySQL() {
		if cp, err := checkpoint.Read(cfg.Checkpoint.Path); err == nil {
			checkScope(cfg, cp, r)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	conn := server.WriterConn(cfg)
	subject := "checkpoint writer " + conn.Addr
	fail := r.unreachable(CheckCheckpointTable, subject, fixWriterUnreachable)
	db, err := server.Open(ctx, conn)
	if err != nil {
		fail("cannot connect", err)
		return
	}
	defer db.Close()
	req := checkpointTableRequest(cfg)
	found, err := InspectCheckpoint(ctx, db, req)
	if err != nil {
		fail("cannot inspect", err)
		return
	}
	r.addFindings(conn.Addr, found) // InspectCheckpoint reports no warnings
	flagged := func(check string) bool {
		return slices.ContainsFunc(found, func(p Problem) bool { return p.Check == check })
	}
	for _, v := range []Item{
		{Check: CheckCheckpointTable, Subject: "table " + req.Name, Message: "exists with the checkpoint store's columns"},
		{Check: CheckCheckpointGrants, Subject: "table " + req.Name, Message: "SELECT, INSERT and UPDATE are granted"},
		{Check: CheckCheckpointWriter, Subject: "server", Message: "is writable (read_only OFF)"},
	} {
		if !flagged(v.Check) {
			v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
			r.Verified = append(r.Verified, v)
		}
	}
	if flagged(CheckCheckpointTable) || flagged(CheckCheckpointGrants) {
		return
	}
	st, err := checkpoint.OpenMySQL(checkpoint.MySQLConfig{DB: db, Table: cfg.Checkpoint.Table, Name: cfg.Checkpoint.Name, Addr: conn.Addr})
	if err != nil {
		return
	}
	// Not closed: that would close db, which the deferred Close above does.
	if cp, err := st.Load(ctx); err == nil {
		checkScope(cfg, cp, r)
	} else {
		fail("cannot read the checkpoint row", err)
	}
}

// checkKafkaStore verifies the kafka checkpoint store (delivery: exactly_once): the checkpoint
// topic exists compacted with one partition (created so when missing), and the committed
// checkpoint covers this config's tables. It never fences a running outboxd: nothing is sent
// with the transactional id. It blocks until the brokers answered or checkTimeout.
func checkKafkaStore(ctx context.Context, cfg *config.Config, r *Report) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	subject := "checkpoint topic " + cfg.Checkpoint.Topic + " on sinks." + cfg.Checkpoint.Sink
	fix := "let check create the topic (its principal needs CREATE on it), or create it with cleanup.policy=compact and 1 partition"
	o, err := sinks.KafkaTxnOptions(cfg)
	var st *kafkatxn.Session
	if err == nil {
		st, err = kafkatxn.New(o)
	}
	if err == nil {
		defer st.Close()
		err = st.Check(ctx, nil)
	}
	if err != nil {
		if fe := (*sink.FixError)(nil); errors.As(err, &fe) {
			fix = fe.Fix
		}
		r.Problems = append(r.Problems, Item{Check: CheckCheckpointTable, Subject: subject, Message: err.Error(), Fix: fix,
			line: fmt.Sprintf("%s: %v [check %s]", subject, err, CheckCheckpointTable)})
		return
	}
	msg := "is compacted with one partition"
	r.Verified = append(r.Verified, Item{Check: CheckCheckpointTable, Subject: subject, Message: msg,
		line: fmt.Sprintf("%s: %s [check %s]", subject, msg, CheckCheckpointTable)})
	cp, err := st.Load(ctx)
	if err != nil {
		r.Problems = append(r.Problems, Item{Check: checkCheckpointScope, Subject: subject, Message: "cannot read the checkpoint back: " + err.Error(),
			Fix:  "check sinks." + cfg.Checkpoint.Sink + " and that its principal may READ the checkpoint topic",
			line: fmt.Sprintf("%s: cannot read the checkpoint back: %v [check %s]", subject, err, checkCheckpointScope)})
		return
	}
	checkScope(cfg, cp, r)
}

// checkCheckpointScope names the check that the checkpoint covers this config's tables and
// is no tombstone.
const checkCheckpointScope = "checkpoint_scope"

// checkScope reports a checkpoint that run would refuse: one written for other tables, or the
// tombstone of a lost one.
func checkScope(cfg *config.Config, cp *checkpoint.Checkpoint, r *Report) {
	subject := "checkpoint " + cfg.Checkpoint.Where()
	if err := checkpoint.CheckScope(cfg.Checkpoint.Where(), cp, cfg.ScopeTables()); err != nil {
		r.Problems = append(r.Problems, Item{
			Check: checkCheckpointScope, Subject: subject, Message: err.Error(),
			line: fmt.Sprintf("%s: %v [check %s]", subject, err, checkCheckpointScope),
		})
		return
	}
	msg := "none yet: the first run starts at source.start"
	if cp != nil {
		msg = "covers this config's tables"
		if cp.Scope == nil {
			msg = "records no table list (written by an older outboxd): the next run adopts it for this config's tables"
		}
	}
	r.Verified = append(r.Verified, Item{Check: checkCheckpointScope, Subject: subject, Message: msg,
		line: fmt.Sprintf("%s: %s [check %s]", subject, msg, checkCheckpointScope)})
}

// fixWriterUnreachable is the fix when check cannot reach or read the checkpoint writer.
const fixWriterUnreachable = "check checkpoint.writer_addr (default source.addr), source.user and source.password, and that the writable primary is up"
