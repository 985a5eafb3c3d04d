package binlog

import (
	"github.com/go-mysql-org/go-mysql/replication"
)

type tableKey struct{ schema, table string }

// TableFilter tells outbox tables from the rest. It is immutable and safe for concurrent use,
// which matters because the parser runs on go-mysql's goroutine while the Assembler runs on
// the Reader's.
type TableFilter struct {
	set map[tableKey]struct{}
	// updates are the tables whose UPDATEs are decoded too (TableSpec.WatchUpdates).
	updates map[tableKey]struct{}
}

// NewTableFilter returns a filter matching the given tables exactly (case-sensitive).
func NewTableFilter(tables []TableSpec) TableFilter {
	f := TableFilter{set: make(map[tableKey]struct{}, len(tables))}
	for _, t := range tables {
		f.set[tableKey{t.Schema, t.Table}] = struct{}{}
		if t.WatchUpdates() {
			if f.updates == nil {
				f.updates = map[tableKey]struct{}{}
			}
			f.updates[tableKey{t.Schema, t.Table}] = struct{}{}
		}
	}
	return f
}

// IsOutbox reports whether schema.table is a configured outbox table. It does not block.
func (f TableFilter) IsOutbox(schema, table string) bool {
	_, ok := f.set[tableKey{schema, table}]
	return ok
}

// DecodeRows is a replication.BinlogParser RowsEventDecodeFunc (BinlogSyncerConfig.
// RowsEventDecodeFunc) that decodes row images only for INSERTs into outbox tables. Every
// other rows event keeps its header (table, flags, column count) but no Rows: decoding the
// row images of busy business tables is most of the parser's work and outboxd ignores them.
// It returns the parser's error for a malformed event.
func (f TableFilter) DecodeRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if e.Table == nil || !f.IsOutbox(string(e.Table.Schema), string(e.Table.Table)) {
		return nil
	}
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
	case replication.EnumRowsEventTypeUpdate,
		replication.EnumRowsEventTypeUnknown: // MySQL's PARTIAL_UPDATE_ROWS_EVENT (partial JSON)
		if _, ok := f.updates[tableKey{string(e.Table.Schema), string(e.Table.Table)}]; !ok {
			return nil
		}
	default:
		return nil
	}
	return e.DecodeData(pos, data)
}
