package binlog

import (
	"context"
	"path"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"
)

type tableKey struct{ schema, table string }

// TablePattern makes every table whose schema and name match two globs an outbox table with
// Spec's columns (config's tables[].pattern). The globs are path.Match patterns, each anchored
// to the whole name.
type TablePattern struct {
	// Text is the pattern as configured, for messages.
	Text string
	// Schema and Table are the globs.
	Schema, Table string
	// Spec is every matching table's spec; its Schema and Table are set per table.
	Spec TableSpec
}

// match reports whether schema.table matches p. A malformed glob matches nothing (config
// validated it).
func (p TablePattern) match(schema, table string) bool {
	ok, _ := path.Match(p.Schema, schema)
	if ok {
		ok, _ = path.Match(p.Table, table)
	}
	return ok
}

// TableAdmitter checks a table that a TablePattern matched before its first row is relayed: the
// same checks a listed table gets at start. The Assembler calls Admit once per table per
// stream, on the stream's goroutine, before any row of the table goes out; an error stops the
// stream with it (no row of the table is skipped). Admit blocks on the checks.
type TableAdmitter interface {
	Admit(ctx context.Context, schema, table, pattern string) error
}

// TableFilter tells outbox tables from the rest. It is safe for concurrent use, which matters
// because the parser runs on go-mysql's goroutine while the Assembler runs on the Reader's. The
// listed tables are an immutable set; the answer for a table a pattern may match is decided
// once per table name and cached, so the globs are not matched again on every rows event.
type TableFilter struct {
	set map[tableKey]struct{}
	// updates are the tables whose UPDATEs are decoded too (TableSpec.WatchUpdates).
	updates map[tableKey]struct{}
	// pats is nil without patterns.
	pats *patternCache
}

// patternCache holds the patterns and, per table name seen, the index of the first pattern it
// matches (-1: none).
type patternCache struct {
	pats    []TablePattern
	decided sync.Map // tableKey → int
}

// NewTableFilter returns a filter matching the given tables exactly (case-sensitive) and every
// table one of the patterns matches (the first that does gives its spec). A listed table is
// never taken by a pattern.
func NewTableFilter(tables []TableSpec, patterns ...TablePattern) TableFilter {
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
	if len(patterns) > 0 {
		f.pats = &patternCache{pats: patterns}
	}
	return f
}

// IsOutbox reports whether schema.table is a configured outbox table, listed or matched by a
// pattern. It does not block.
func (f TableFilter) IsOutbox(schema, table string) bool {
	k := tableKey{schema, table}
	if _, ok := f.set[k]; ok {
		return true
	}
	return f.patternIndex(k) >= 0
}

// Pattern returns the pattern that makes schema.table an outbox table, with the table's spec,
// and false for a listed table or one no pattern matches. It does not block; the first call
// for a name matches the globs, later ones read the cached decision.
func (f TableFilter) Pattern(schema, table string) (TablePattern, bool) {
	if f.pats == nil {
		return TablePattern{}, false
	}
	k := tableKey{schema, table}
	if _, listed := f.set[k]; listed {
		return TablePattern{}, false
	}
	i := f.patternIndex(k)
	if i < 0 {
		return TablePattern{}, false
	}
	p := f.pats.pats[i]
	p.Spec.Schema, p.Spec.Table = schema, table
	return p, true
}

// patternIndex is the index of the first pattern k matches, -1 when none does or there are no
// patterns, whether or not k is listed (the callers look at f.set first). The first call for a
// name matches the globs, later ones read the cached decision.
func (f TableFilter) patternIndex(k tableKey) int {
	if f.pats == nil {
		return -1
	}
	if v, ok := f.pats.decided.Load(k); ok {
		return v.(int)
	}
	i := -1
	for j, p := range f.pats.pats {
		if p.match(k.schema, k.table) {
			i = j
			break
		}
	}
	f.pats.decided.Store(k, i)
	return i
}

// watchesUpdates reports whether the UPDATEs of outbox table schema.table are decoded.
func (f TableFilter) watchesUpdates(schema, table string) bool {
	k := tableKey{schema, table}
	if _, ok := f.updates[k]; ok {
		return true
	}
	if f.pats == nil {
		return false
	}
	if _, listed := f.set[k]; listed {
		return false
	}
	i := f.patternIndex(k)
	return i >= 0 && f.pats.pats[i].Spec.WatchUpdates()
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
		if !f.watchesUpdates(string(e.Table.Schema), string(e.Table.Table)) {
			return nil
		}
	default:
		return nil
	}
	return e.DecodeData(pos, data)
}
