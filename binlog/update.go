package binlog

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// handleUpdates records the new images of UPDATEd rows of an outbox table whose spec watches
// updates (tables[].on_update warn or stop) in the current transaction's Updates. They are
// never delivered: an outbox row is an event that happened, and its update is a bug of the
// writer that the operator wants to hear about (Debezium's table.op.invalid.behavior).
func (a *Assembler) handleUpdates(ctx context.Context, ev *replication.BinlogEvent, e *replication.RowsEvent, st *tableState) error {
	if a.cur == nil {
		a.begin("", time.Unix(int64(ev.Header.Timestamp), 0).UTC(), stateInTxn)
	}
	names, err := a.columnNames(ctx, st, e.Table)
	if err != nil {
		return err
	}
	p := newProjection(st.spec.Columns, names, e.Table)
	skippedAt := func(i int) []int {
		if i < len(e.SkippedColumns) {
			return e.SkippedColumns[i]
		}
		return nil
	}
	// Rows alternate before and after images. With binlog_row_image=MINIMAL the after image
	// has only the changed columns and the before image only the key: take the row's id and
	// event id from whichever has them, to name the row.
	for i := 1; i < len(e.Rows); i += 2 {
		after := p.event(st.spec, e.Rows[i], skippedAt(i))
		before := p.event(st.spec, e.Rows[i-1], skippedAt(i-1))
		if after.ID == "" {
			after.ID = before.ID
		}
		if after.EventID.Missing {
			after.EventID = before.EventID
		}
		a.cur.Updates = append(a.cur.Updates, after)
	}
	return nil
}

// timeField is field for the timestamp column: a TIMESTAMP is an instant, given as its epoch
// milliseconds so that no time zone (go-mysql's is the process's) comes into it; a DATETIME is
// a wall-clock time, given as MySQL prints it, for the router to read in the configured zone.
func (p projection) timeField(i int, row []any, skipped []int) Field {
	f := p.field(i, row, skipped)
	if f.Missing || f.Null || i >= len(row) {
		return f
	}
	t, ok := row[i].(time.Time)
	if !ok || i >= len(p.tm.ColumnType) {
		return f
	}
	switch p.tm.ColumnType[i] {
	case mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2:
		return Field{Bytes: strconv.AppendInt(nil, t.UnixMilli(), 10)}
	}
	return f
}

// UpdateError is the Reader's error for an UPDATE of an outbox row whose table has on_update:
// stop. The transaction holding it is not delivered (nor any after it): the checkpoint stays
// before it, so a restart stops at the same row until the operator changes on_update.
type UpdateError struct {
	Schema, Table string
	// ID is the row's id column, EventID its event id ("" when absent or NULL).
	ID, EventID string
	GTID        string
}

func (e *UpdateError) Error() string {
	id := ""
	if e.ID != "" {
		id = "id " + e.ID + ", "
	}
	return fmt.Sprintf("outbox row in %s.%s (%sevent_id %q, gtid %s) was UPDATEd: outbox rows are insert-only and an update is never sent; "+
		"fix the code that updates it, then set tables[].on_update: warn (or ignore) to get past this transaction", e.Schema, e.Table, id, e.EventID, e.GTID)
}

// updates reports the UPDATEd outbox rows of txn as each table's OnUpdate says: warn logs and
// counts each, stop returns an *UpdateError for the first of a stop table.
func (r *Reader) updates(txn *Txn) error {
	for i := range txn.Updates {
		ev := &txn.Updates[i]
		table := ev.Schema + "." + ev.Table
		if r.onUpdateOf(ev.Schema, ev.Table) == "stop" {
			return &UpdateError{Schema: ev.Schema, Table: ev.Table, ID: ev.ID, EventID: text(ev.EventID), GTID: txn.GTID}
		}
		r.cfg.Metrics.OutboxUpdate(table)
		r.cfg.Logger.Warn().Str("table", table).Str("id", ev.ID).Str("event_id", text(ev.EventID)).Str("gtid", txn.GTID).
			Msg("an outbox row was UPDATEd; outbox rows are insert-only and the update is not sent (tables[].on_update: warn)")
	}
	return nil
}

func text(f Field) string {
	if f.Missing || f.Null {
		return ""
	}
	return string(f.Bytes)
}

// onUpdateOf is the OnUpdate of outbox table schema.table: its listed spec's, else the first
// matching pattern's. UPDATEs of outbox rows are rare: the globs are matched each time.
func (r *Reader) onUpdateOf(schema, table string) string {
	if v, ok := r.onUpdate[tableKey{schema, table}]; ok {
		return v
	}
	for _, p := range r.cfg.Patterns {
		if p.match(schema, table) {
			return p.Spec.OnUpdate
		}
	}
	return ""
}
