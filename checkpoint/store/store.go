// Package store opens the checkpoint store a config names (checkpoint.path or checkpoint.store:
// mysql) with the scope a checkpoint written under that config records, for run and the
// commands alike.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/sink/sinks"
)

// Open opens the configured checkpoint store: the file (locked until Close) or the row of
// checkpoint.table on checkpoint.writer_addr, reached with source's user, password and TLS. A
// writer that is not reachable yet is waited for with the reconnect backoff, as the source is
// at start; a refused login ends it at once, and retrying (when not nil) hears each failed
// attempt it waits after (server.OpenReporting). It blocks until then or ctx ends.
func Open(ctx context.Context, cfg *config.Config, log zerolog.Logger, retrying func(error)) (checkpoint.Storage, error) {
	if cfg.Checkpoint.Kafka() {
		return openKafka(cfg, log)
	}
	if !cfg.Checkpoint.MySQL() {
		return checkpoint.Open(cfg.Checkpoint.Path)
	}
	conn := server.WriterConn(cfg)
	db, err := server.OpenReporting(ctx, conn, "checkpoint writer", log, retrying)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.writer_addr %s: %w", conn.Addr, err)
	}
	return openMySQL(cfg, conn, db)
}

// openKafka builds the kafka store of cfg (checkpoint.store: kafka) without contacting the
// brokers: it reads the committed checkpoint back without fencing anyone, and fences only when
// claimed (a term's start) or written to (a command's save).
func openKafka(cfg *config.Config, log zerolog.Logger) (checkpoint.Storage, error) {
	o, err := sinks.KafkaTxnOptions(cfg)
	if err != nil {
		return nil, err
	}
	o.Logger = log
	return kafkatxn.NewStore(o)
}

// openMySQL opens the mysql store of cfg on db, a connection to conn (the writer), and closes
// db when that fails.
func openMySQL(cfg *config.Config, conn server.Conn, db *sql.DB) (checkpoint.Storage, error) {
	st, err := checkpoint.OpenMySQL(checkpoint.MySQLConfig{DB: db, Table: cfg.Checkpoint.Table, Name: cfg.Checkpoint.Name, Addr: conn.Addr, Scope: Scope(cfg)})
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

// Scope is what a checkpoint written with cfg covers: its outbox tables, and its source
// (flavor and addresses, as outboxd sees it; for diagnostics). Pure.
func Scope(cfg *config.Config) *checkpoint.Scope {
	return checkpoint.NewScope(string(cfg.Source.Flavor)+"://"+strings.Join(cfg.Source.Addrs, ","), cfg.ScopeTables())
}
