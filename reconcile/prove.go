package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/router"
)

// ProvenRow is one outbox row with proof of delivery: its event id is at the destination its
// route gives (see ProveOptions).
type ProvenRow struct {
	// EventID is the row's event_id, byte for byte.
	EventID []byte
	// PK is the row's primary key in key order, as the server's text of each value.
	PK []any
}

// ProveOptions says which rows Prove looks at and where it hands the proven ones.
type ProveOptions struct {
	// Table is the index of the outbox table in cfg.Tables; PK names its primary-key columns.
	Table int
	PK    []string
	// Zone is the time_zone a DATETIME created_at is written in ("" : the connection's, as
	// Run assumes); a TIMESTAMP ignores it.
	Zone string
	// Window, Before, After, Readers and SliceRows are Options'.
	Window        Window
	Before, After time.Duration
	Readers       map[string]Reader
	SliceRows     int
	// MaxListed bounds the report's lists, as in Options.
	MaxListed int
	// Proven is called after each slice with its rows that have proof; an error stops Prove.
	Proven func(ctx context.Context, rows []ProvenRow) error
}

// Prove is Run over one table, for a caller that acts on proof of delivery (the cleanup
// sweep): after each slice it hands opts.Proven the rows whose event id was found at the topic
// their route gives, in messages the table itself sent (the outbox_table header), at least as
// often as the slice has rows with that id. A row routed to the
// dead letter, found only there, found fewer times, or not found is never handed over. Memory
// is bounded as in Run (the rows' keys are held with the slice). The Report counts as Run's
// does; with Proven's rows counted by the caller, Checked minus those is what has no proof. It
// blocks on the database and the brokers; after an error some slices may have been handed over.
func Prove(ctx context.Context, db *sql.DB, cfg *config.Config, opts ProveOptions) (Report, error) {
	if err := opts.Window.Validate(); err != nil {
		return Report{}, &ConfigError{Err: err}
	}
	if opts.Table < 0 || opts.Table >= len(cfg.Tables) || len(opts.PK) == 0 || opts.Proven == nil {
		return Report{}, fmt.Errorf("reconcile: Prove needs a configured table, its primary key and Proven")
	}
	rt, err := router.New(cfg)
	if err != nil {
		return Report{}, &ConfigError{Err: err}
	}
	t := cfg.Tables[opts.Table]
	tq, err := tableQuery(ctx, db, opts.Table, t, opts.Zone, opts.PK)
	if err != nil {
		return Report{}, err
	}
	src := &tableSource{db: db, tables: []tableQ{tq}}
	return check(ctx, cfg, rt, src, Options{
		Window: opts.Window, Before: opts.Before, After: opts.After, Readers: opts.Readers,
		SliceRows: opts.SliceRows, MaxListed: opts.MaxListed, proven: opts.Proven,
		// Two tables may route to one topic with the same event ids: only this table's
		// messages prove its rows.
		table: t.Schema() + "." + t.Name(),
		// A repeated event id: one message must not prove twins in two slices.
		idRows: func(ctx context.Context, ids []string) (map[string]int, error) { return rowsWithIDs(ctx, db, t, ids) },
	})
}

// idChunk bounds the event ids of one rowsWithIDs statement.
const idChunk = 1000

// rowsWithIDs counts the rows of table t with each of ids as event_id, byte for byte, in the
// whole table. The IN list compares under the column's collation (which may match more, never
// fewer), the grouping as bytes. It blocks on one query per idChunk ids: an index on event_id
// makes each a lookup, without one each scans the table.
func rowsWithIDs(ctx context.Context, db *sql.DB, t config.Table, ids []string) (map[string]int, error) {
	out := make(map[string]int, len(ids))
	col := sqlident.Quote(t.Columns.EventID)
	for len(ids) > 0 {
		n := min(len(ids), idChunk)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		ids = ids[n:]
		q := "SELECT BINARY " + col + ", COUNT(*) FROM " + sqlident.Table(t.Schema(), t.Name()) +
			" WHERE " + col + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ") GROUP BY BINARY " + col
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("reconcile: count the rows of %s by event id: %w", t.Table, err)
		}
		for rows.Next() {
			var id []byte
			var c int
			if err := rows.Scan(&id, &c); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reconcile: count the rows of %s by event id: %w", t.Table, err)
			}
			out[string(id)] += c
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("reconcile: count the rows of %s by event id: %w", t.Table, err)
		}
	}
	return out, nil
}
