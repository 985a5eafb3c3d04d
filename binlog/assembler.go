// Package binlog turns a MySQL/MariaDB binlog stream into committed transactions (Txn) carrying
// the rows inserted into configured outbox tables.
//
// Two layers: Assembler is pure event handling (no I/O other than an optional ColumnResolver),
// shared by the live stream and by tests that parse binlog files; Reader drives go-mysql's
// BinlogSyncer and feeds the Assembler.
package binlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

// ColumnNames maps the outbox roles onto a table's real column names.
type ColumnNames struct {
	EventID, Key, Topic, Payload, EventType, Headers string
	// Timestamp and Partition are optional (empty: not projected); Extra are the columns
	// placed as headers, projected into Event.Extra in this order.
	Timestamp, Partition string
	Extra                []string
}

// defaultColumnNames backs DefaultColumnNames; never mutated.
var defaultColumnNames = ColumnNames{
	EventID:   "event_id",
	Key:       "biz_key",
	Topic:     "topic",
	Payload:   "payload",
	EventType: "event_type",
	Headers:   "headers",
}

// DefaultColumnNames returns the column names used for roles left empty in a TableSpec.
func DefaultColumnNames() ColumnNames { return defaultColumnNames }

// withDefaults fills empty roles with the default column names.
func (c ColumnNames) withDefaults() ColumnNames {
	d := defaultColumnNames
	if c.EventID == "" {
		c.EventID = d.EventID
	}
	if c.Key == "" {
		c.Key = d.Key
	}
	if c.Topic == "" {
		c.Topic = d.Topic
	}
	if c.Payload == "" {
		c.Payload = d.Payload
	}
	if c.EventType == "" {
		c.EventType = d.EventType
	}
	if c.Headers == "" {
		c.Headers = d.Headers
	}
	return c
}

// TableSpec names one outbox table and how its columns map onto the outbox roles. Schema and
// Table match the binlog's names exactly (case-sensitive, as on a server with
// lower_case_table_names=0).
type TableSpec struct {
	Schema, Table string
	Columns       ColumnNames
	// PrimaryKey makes every Event of the table carry its primary key (Event.PK).
	PrimaryKey bool
	// OnUpdate is what an UPDATE of the table's rows does: "" or "ignore" (not even decoded),
	// "warn" (logged and counted) or "stop" (the Reader fails with an *UpdateError). See
	// Txn.Updates.
	OnUpdate string
}

// WatchUpdates reports whether the table's UPDATEs are decoded and reported.
func (t TableSpec) WatchUpdates() bool { return t.OnUpdate == "warn" || t.OnUpdate == "stop" }

// ColumnResolver returns a table's columns in ordinal order, as the table is defined now. The
// Assembler uses it when a TABLE_MAP carries no column names (binlog_row_metadata=MINIMAL): the
// names by position, and the types to check each row's TABLE_MAP against (see Column).
// server.ColumnReader reads them from information_schema.
type ColumnResolver interface {
	Definitions(ctx context.Context, schema, table string) ([]Column, error)
}

// AssemblerConfig configures an Assembler.
type AssemblerConfig struct {
	Flavor gtid.Flavor
	Tables []TableSpec
	// Patterns make more tables outbox tables, each once Admit accepted it (at its first rows
	// event in the stream).
	Patterns []TablePattern
	// Admit checks a table found by pattern; nil accepts every one.
	Admit   TableAdmitter
	Columns ColumnResolver // optional; needed only for MINIMAL row metadata
	// PieceEvents makes a transaction with more outbox rows than this come out in pieces of
	// about this many events (see Txn.Partial); 0 means DefaultPieceEvents, negative never.
	PieceEvents int
	// CheckpointTable is outboxd's own checkpoint table (the mysql store), whose transactions
	// are marked Txn.OnlyCheckpoint; zero when the checkpoint is a file.
	CheckpointTable TableRef
	Logger          zerolog.Logger
	// RecordLayouts makes a transaction with a DDL statement that names outbox tables read
	// their columns at once and carry them (Txn.Layouts); without it they are read at the
	// next row only.
	RecordLayouts bool
}

// TableRef names one table.
type TableRef struct{ Schema, Table string }

// DefaultPieceEvents is the piece size of large transactions.
const DefaultPieceEvents = 512

// txnState is where the Assembler is between transaction boundaries.
type txnState int

const (
	stateIdle       txnState = iota // between transactions
	stateAfterGTID                  // MySQL GTID seen; the next Query is BEGIN or a DDL statement
	stateInTxn                      // inside BEGIN … XID/COMMIT
	stateStandalone                 // MariaDB standalone GTID: the next Query ends the transaction
)

// tableState is one outbox table's spec plus its cached column names (MINIMAL metadata only).
type tableState struct {
	spec TableSpec
	// cols and names are from the ColumnResolver; nil when not resolved or invalidated.
	cols  []Column
	names []string
	// metaNames are the column names the last TABLE_MAP with FULL row metadata carried: every
	// transaction brings its own TABLE_MAP, and converting its names to strings was 2% of a
	// 1-row catch-up's CPU.
	metaNames []string
}

// Assembler groups binlog events into transactions. It is not safe for concurrent use: one
// goroutine owns it (the Reader's Run loop, or a test feeding a file).
type Assembler struct {
	flavor   gtid.Flavor
	filter   TableFilter
	tables   map[tableKey]*tableState
	admit    TableAdmitter
	resolver ColumnResolver
	log      zerolog.Logger
	piece    int // PieceEvents; 0 = never
	// emitted is set once a piece of the current transaction went out.
	emitted bool

	file string
	pos  uint32

	state txnState
	cur   *Txn
	slab  eventSlab // the events of cur
	// inPayload is set while the inner events of a TRANSACTION_PAYLOAD are handled: their
	// headers carry positions inside the compressed blob, not file positions.
	inPayload bool
	xa        xaGroup // see xa.go
	// ckTable and ownRows mark outboxd's own checkpoint writes (own.go).
	ckTable tableKey
	ownRows ownRows
	// ddlTables are the outbox tables a DDL statement of the open transaction names: their
	// layouts are read when it completes (Txn.Layouts).
	ddlTables     []tableKey
	recordLayouts bool
}

// NewAssembler returns an Assembler for the configured outbox tables. It does not block.
func NewAssembler(cfg AssemblerConfig) *Assembler {
	a := &Assembler{
		flavor:   cfg.Flavor,
		filter:   NewTableFilter(cfg.Tables, cfg.Patterns...),
		tables:   make(map[tableKey]*tableState, len(cfg.Tables)),
		admit:    cfg.Admit,
		resolver: cfg.Columns,
		log:      cfg.Logger,
		piece:    cfg.PieceEvents,
		ckTable:  tableKey{cfg.CheckpointTable.Schema, cfg.CheckpointTable.Table},

		recordLayouts: cfg.RecordLayouts,
	}
	if a.piece == 0 {
		a.piece = DefaultPieceEvents
	} else if a.piece < 0 {
		a.piece = 0
	}
	for _, t := range cfg.Tables {
		t.Columns = t.Columns.withDefaults()
		a.tables[tableKey{t.Schema, t.Table}] = &tableState{spec: t}
	}
	return a
}

// Filter returns the outbox-table filter, for use as the parser's RowsEventDecodeFunc.
func (a *Assembler) Filter() TableFilter { return a.filter }

// Position reports the binlog file and position after the last handled event.
func (a *Assembler) Position() (file string, pos uint32) { return a.file, a.pos }

// Handle consumes one event. It returns the transaction that this event completes, or nil.
// It blocks only while the ColumnResolver runs (MINIMAL metadata, first row of a table or after
// a DDL). On error the Assembler's state is unspecified: the caller must stop and restart from
// its last checkpoint with a new Assembler.
func (a *Assembler) Handle(ctx context.Context, ev *replication.BinlogEvent) (*Txn, error) {
	if ev == nil || ev.Header == nil {
		return nil, nil
	}
	if !a.inPayload && ev.Header.LogPos > 0 {
		a.pos = ev.Header.LogPos
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		// Both the artificial rotate at the start of a dump and the real one at a file's end
		// name the file the next events come from.
		a.file = string(e.NextLogName)
		a.pos = uint32(e.Position)
	case *replication.GTIDEvent:
		gt := ""
		if ev.Header.EventType != replication.ANONYMOUS_GTID_EVENT {
			s, err := mysqlGTID(e)
			if err != nil {
				return nil, err
			}
			gt = s
		}
		a.begin(gt, mysqlCommitTime(e, ev.Header), stateAfterGTID)
		a.cur.CommitTimePrecise = e.ImmediateCommitTimestamp != 0
	case *replication.GtidTaggedLogEvent:
		s, err := mysqlGTID(&e.GTIDEvent)
		if err != nil {
			return nil, err
		}
		a.begin(s, mysqlCommitTime(&e.GTIDEvent, ev.Header), stateAfterGTID)
		a.cur.CommitTimePrecise = e.ImmediateCommitTimestamp != 0
	case *replication.MariadbGTIDEvent:
		st := stateInTxn // MariaDB's GTID event is itself the BEGIN
		if e.IsStandalone() {
			st = stateStandalone
		}
		g := e.GTID
		a.begin(mariadbGTID(g.DomainID, g.ServerID, g.SequenceNumber),
			time.Unix(int64(ev.Header.Timestamp), 0).UTC(), st)
		a.xa.open = e.Flags&mariadbFlPreparedXA != 0
	case *replication.QueryEvent:
		// BEGIN and COMMIT, most QUERY events of a busy binlog, are never DML: no string copies
		// or lexing for them.
		if !isBoundary(e.Query) {
			if err := a.checkStatement(string(e.Schema), string(e.Query)); err != nil {
				return nil, err
			}
		}
		if t, ok, err := a.xaQuery(ev, e); ok {
			return t, err
		}
		t := a.handleQuery(ev, e)
		if t != nil && len(a.ddlTables) > 0 {
			a.readLayouts(ctx, t)
		}
		return t, nil
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			return a.xaPrepare(ev, e)
		}
	case *replication.ExecuteLoadQueryEvent:
		return nil, a.checkLoad(ev)
	case *replication.XIDEvent:
		if a.cur != nil {
			return a.complete(), nil
		}
	case *replication.RowsEvent:
		if err := a.handleRows(ctx, ev, e); err != nil {
			return nil, err
		}
		return a.maybePiece(), nil
	case *replication.TransactionPayloadEvent:
		return a.handlePayload(ctx, ev, e)
	case *replication.HeartbeatEvent:
		// Heartbeats carry no data; lag tracking will hook in here (the server sends one per
		// HeartbeatPeriod while idle, with the current file position).
	}
	return nil, nil
}

// handlePayload feeds a MySQL 8 TRANSACTION_PAYLOAD's decompressed events through Handle. The
// transaction it holds ends at the payload event's own end position.
func (a *Assembler) handlePayload(ctx context.Context, ev *replication.BinlogEvent, e *replication.TransactionPayloadEvent) (*Txn, error) {
	a.inPayload = true
	defer func() { a.inPayload = false }()
	var done *Txn
	for _, inner := range e.Events {
		t, err := a.Handle(ctx, inner)
		if err != nil {
			return nil, err
		}
		if t != nil {
			if done != nil {
				return nil, fmt.Errorf("transaction payload at %s:%d holds more than one transaction", a.file, ev.Header.LogPos)
			}
			done = t
		}
	}
	return done, nil
}

// maybePiece splits off the events gathered so far when the open transaction has grown past
// the piece size. Rows in the binlog are committed (the server writes a transaction at its
// commit), so sending them before the XID arrives is safe; the checkpoint still waits for the
// last piece. The events of a compressed MySQL payload are in memory anyway and stay whole.
func (a *Assembler) maybePiece() *Txn {
	if a.piece == 0 || a.cur == nil || a.inPayload || len(a.cur.Events) < a.piece {
		return nil
	}
	p := &Txn{GTID: a.cur.GTID, CommitTime: a.cur.CommitTime, CommitTimePrecise: a.cur.CommitTimePrecise,
		Events: a.cur.Events, Partial: true, XA: a.pieceStep()}
	a.cur.Events = nil // the next rows event takes room (slab)
	a.emitted = true
	return p
}

// begin opens a transaction. A still-open one was never committed in this stream (a binlog
// truncated by a crash); its rows are dropped, as the server did.
func (a *Assembler) begin(gt string, at time.Time, st txnState) {
	if a.cur != nil {
		ev := a.log.Warn()
		if a.emitted {
			// Only a server crash in the middle of writing a large transaction to the binlog
			// can do this; pieces of it were already sent.
			ev = a.log.Error().Bool("pieces_sent", true)
		}
		ev.Str("gtid", a.cur.GTID).Str("next_gtid", gt).
			Msg("binlog transaction without commit dropped: a new transaction started before its XID/COMMIT")
	}
	a.cur = &Txn{GTID: gt, CommitTime: at}
	a.emitted = false
	a.ownRows = ownRows{}
	a.state = st
	a.xa = xaGroup{}
}

func (a *Assembler) complete() *Txn {
	t := a.cur
	t.File, t.Pos = a.file, a.pos
	t.OnlyCheckpoint = a.ownRows.only() && len(t.Events) == 0 && !a.emitted
	if a.xa.open {
		// An XA group that ends in a COMMIT rather than an XA_PREPARE_LOG_EVENT committed in one
		// phase: pieces sent ahead as XAPending are committed with it.
		t.XA = &XAStep{Op: XAOnePhase}
	}
	a.cur, a.state, a.emitted, a.xa = nil, stateIdle, false, xaGroup{}
	return t
}

// handleQuery applies the transaction-boundary rules to a QUERY event.
func (a *Assembler) handleQuery(ev *replication.BinlogEvent, e *replication.QueryEvent) *Txn {
	q := strings.TrimSpace(string(e.Query))
	switch a.state {
	case stateInTxn:
		// "ROLLBACK" appears when a transaction that changed non-transactional tables rolled
		// back: the GTID is consumed either way. "ROLLBACK TO SAVEPOINT" stays inside.
		if strings.EqualFold(q, "COMMIT") || strings.EqualFold(q, "ROLLBACK") {
			return a.complete()
		}
		return nil
	case stateAfterGTID:
		if isBegin(q) {
			a.state = stateInTxn
			return nil
		}
		a.ddl(q)
		return a.complete()
	case stateStandalone:
		a.ddl(q)
		return a.complete()
	default: // idle: a binlog without GTID events (MySQL 5.6 and older with gtid_mode=OFF)
		if isBegin(q) {
			a.begin("", time.Unix(int64(ev.Header.Timestamp), 0).UTC(), stateInTxn)
			return nil
		}
		a.ddl(q)
		a.cur = &Txn{CommitTime: time.Unix(int64(ev.Header.Timestamp), 0).UTC()}
		return a.complete()
	}
}

// isBoundary reports whether q is exactly BEGIN, COMMIT or ROLLBACK (any case).
func isBoundary(q []byte) bool {
	return bytes.EqualFold(q, []byte("BEGIN")) || bytes.EqualFold(q, []byte("COMMIT")) || bytes.EqualFold(q, []byte("ROLLBACK"))
}

func isBegin(q string) bool {
	return strings.EqualFold(q, "BEGIN") || hasPrefixFold(q, "XA START")
}

// ddl drops cached column names of outbox tables that the statement may have changed, and
// notes the tables for readLayouts.
func (a *Assembler) ddl(q string) {
	a.ddlTables = a.ddlTables[:0]
	for k, st := range a.tables {
		if !ddlMentionsTable(q, k.schema, k.table) {
			continue
		}
		a.ddlTables = append(a.ddlTables, k)
		if st.names != nil {
			a.log.Info().Str("table", k.schema+"."+k.table).Msg("DDL on outbox table: column names will be re-read")
			st.cols, st.names = nil, nil
		}
	}
}

// readLayouts sets t.Layouts to the columns, as the resolver has them now, of the outbox tables
// that t's DDL statement names: the layout rows after t are read with, which the checkpoint
// records once it covers t. A table that cannot be read (dropped, the connection failed) gets
// nil columns, an unknown layout, rather than stopping the stream: a restart from a checkpoint
// that recorded it stops and asks (checkpoint.Layouts).
func (a *Assembler) readLayouts(ctx context.Context, t *Txn) {
	tables := a.ddlTables
	a.ddlTables = a.ddlTables[:0]
	if a.resolver == nil || !a.recordLayouts {
		return
	}
	t.Layouts = make(map[TableRef][]Column, len(tables))
	for _, k := range tables {
		cols, err := a.resolver.Definitions(ctx, k.schema, k.table)
		if err != nil {
			a.log.Warn().Err(err).Str("table", k.schema+"."+k.table).Str("gtid", t.GTID).
				Msg("DDL on outbox table: its columns could not be read, so its layout is recorded as unknown")
			cols = nil
		} else {
			// The names for the rows after the DDL, as columnNames would read them at the next
			// row (and checks against each TABLE_MAP as it does).
			st := a.tables[k]
			st.cols, st.names = cols, columnNamesOf(cols)
		}
		t.Layouts[TableRef{k.schema, k.table}] = cols
	}
}

// handleRows turns the INSERTed rows of outbox tables into Events of the current transaction.
func (a *Assembler) handleRows(ctx context.Context, ev *replication.BinlogEvent, e *replication.RowsEvent) error {
	a.ownRows.note(a.ckTable, e)
	if e.Table == nil {
		return nil
	}
	st, ok := a.tables[tableKey{string(e.Table.Schema), string(e.Table.Table)}]
	if !ok {
		var err error
		if st, err = a.admitted(ctx, string(e.Table.Schema), string(e.Table.Table)); st == nil || err != nil {
			return err
		}
	}
	if st.spec.WatchUpdates() && (e.Type() == replication.EnumRowsEventTypeUpdate || ev.Header.EventType == replication.PARTIAL_UPDATE_ROWS_EVENT) {
		return a.handleUpdates(ctx, ev, e, st)
	}
	if e.Type() != replication.EnumRowsEventTypeInsert {
		return nil // UPDATE, DELETE, partial JSON update: outbox rows are insert-only
	}
	table := st.spec.Schema + "." + st.spec.Table
	if a.cur == nil {
		// Every server version writes a GTID or BEGIN first; keep the rows rather than lose them.
		a.log.Warn().Str("table", table).Uint32("pos", ev.Header.LogPos).
			Msg("rows event outside a transaction: treating it as the start of one")
		a.begin("", time.Unix(int64(ev.Header.Timestamp), 0).UTC(), stateInTxn)
	}
	names, err := a.columnNames(ctx, st, e.Table)
	if err != nil {
		return err
	}
	p := newProjection(st.spec.Columns, names, e.Table)
	a.cur.Events = a.slab.grow(a.cur.Events, len(e.Rows))
	// The keys of the whole rows event share one backing array: one allocation, not one a row.
	var pks []any
	npk := len(e.Table.PrimaryKey)
	if st.spec.PrimaryKey && npk > 0 {
		pks = make([]any, 0, npk*len(e.Rows))
	}
	for i, row := range e.Rows {
		var skipped []int
		if i < len(e.SkippedColumns) {
			skipped = e.SkippedColumns[i]
		}
		if len(skipped) > 0 {
			return a.partialImage(st.spec, names, skipped)
		}
		ev := p.event(st.spec, row, skipped)
		if pks != nil {
			ev.PK, pks = primaryKey(pks, e.Table.PrimaryKey, row)
		}
		a.cur.Events = append(a.cur.Events, ev)
	}
	return nil
}

// admitted returns the state of schema.table when a pattern makes it an outbox table and the
// TableAdmitter accepts it, nil when no pattern matches it, and the admitter's error, wrapped
// with the table, the pattern and the transaction, when it fails the checks: its rows are never
// skipped, the stream stops before the first of them. Once accepted the table is one of
// a.tables for the rest of the stream, so the check runs once per table per stream.
func (a *Assembler) admitted(ctx context.Context, schema, table string) (*tableState, error) {
	p, ok := a.filter.Pattern(schema, table)
	if !ok {
		return nil, nil
	}
	if a.admit != nil {
		if err := a.admit.Admit(ctx, schema, table, p.Text); err != nil {
			return nil, fmt.Errorf("outbox table %s.%s (tables[].pattern %q) at its first row in gtid %s: %w", schema, table, p.Text, a.txnGTID(), err)
		}
	}
	p.Spec.Columns = p.Spec.Columns.withDefaults()
	st := &tableState{spec: p.Spec}
	a.tables[tableKey{schema, table}] = st
	a.log.Info().Str("table", schema+"."+table).Str("pattern", p.Text).Str("gtid", a.txnGTID()).
		Msg("outbox table found by pattern: checked, relaying its rows")
	return st, nil
}

// primaryKey appends row's primary-key values (cols are their column indexes, in key order)
// to pks and returns them as a slice of their own capacity, and pks grown by them. A key
// column past the row (a malformed TABLE_MAP) gives no key at all.
func primaryKey(pks []any, cols []uint64, row []any) (key, rest []any) {
	start := len(pks)
	for _, c := range cols {
		if c >= uint64(len(row)) {
			return nil, pks[:start]
		}
		pks = append(pks, row[c])
	}
	return pks[start:len(pks):len(pks)], pks
}

// errNoColumnNames is wrapped when MINIMAL metadata meets a missing resolver.
var errNoColumnNames = errors.New("TABLE_MAP has no column names (binlog_row_metadata=MINIMAL) and no column resolver is configured")

// columnNames returns the names of tm's columns in ordinal order. Names from the resolver are
// checked against tm's column types (see checkColumnTypes); a cached definition that does not
// fit is read again once before that is an error.
func (a *Assembler) columnNames(ctx context.Context, st *tableState, tm *replication.TableMapEvent) ([]string, error) {
	n := int(tm.ColumnCount)
	if len(tm.ColumnName) == n && n > 0 {
		if !sameNames(st.metaNames, tm.ColumnName) {
			st.metaNames = tm.ColumnNameString()
		}
		return st.metaNames, nil
	}
	if len(st.cols) == n && a.checkColumnTypes(st.spec, tm, st.cols) == nil {
		return st.names, nil
	}
	table := st.spec.Schema + "." + st.spec.Table
	if a.resolver == nil {
		return nil, &StopError{Table: table, GTID: a.txnGTID(), Setting: "binlog_row_metadata", Err: errNoColumnNames,
			Fix: "set binlog_row_metadata=FULL on the server"}
	}
	cols, err := a.resolver.Definitions(ctx, st.spec.Schema, st.spec.Table)
	if err != nil {
		return nil, fmt.Errorf("outbox table %s: reading column names (binlog_row_metadata=MINIMAL): %w", table, err)
	}
	if len(cols) != n {
		// The table changed after this row was written: the current names cannot be mapped onto
		// the old row by position.
		return nil, &StopError{Table: table, GTID: a.txnGTID(), Setting: "binlog_row_metadata",
			Problem: fmt.Sprintf("binlog row has %d columns but the table now has %d; it was altered after this row was written", n, len(cols)),
			Fix:     "set binlog_row_metadata=FULL so rows carry their own column names"}
	}
	if err := a.checkColumnTypes(st.spec, tm, cols); err != nil {
		return nil, err
	}
	names := columnNamesOf(cols)
	st.cols, st.names = cols, names
	return names, nil
}

// sameNames reports whether names are raw, compared without converting raw.
func sameNames(names []string, raw [][]byte) bool {
	if len(names) != len(raw) {
		return false
	}
	for i, b := range raw {
		if names[i] != string(b) {
			return false
		}
	}
	return true
}

func columnNamesOf(cols []Column) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return names
}

// projection maps one TABLE_MAP's column positions onto the outbox roles.
type projection struct {
	eventID, key, topic, payload, eventType, headers, id int // -1 when the table lacks it
	// timestamp and partition are -2 when not configured (-1: configured, the table lacks it).
	timestamp, partition int
	extra                []int
	enums                map[int][]string
	tm                   *replication.TableMapEvent
}

func newProjection(c ColumnNames, names []string, tm *replication.TableMapEvent) projection {
	idx := func(name string) int {
		for i, n := range names {
			if n == name {
				return i
			}
		}
		for i, n := range names { // MySQL column names are case-insensitive
			if strings.EqualFold(n, name) {
				return i
			}
		}
		return -1
	}
	p := projection{
		eventID: idx(c.EventID), key: idx(c.Key), topic: idx(c.Topic), payload: idx(c.Payload),
		eventType: idx(c.EventType), headers: idx(c.Headers), id: idx("id"), tm: tm,
		timestamp: -2, partition: -2,
	}
	if c.Timestamp != "" {
		p.timestamp = idx(c.Timestamp)
	}
	if c.Partition != "" {
		p.partition = idx(c.Partition)
	}
	if len(c.Extra) > 0 {
		p.extra = make([]int, len(c.Extra))
		for i, name := range c.Extra {
			p.extra[i] = idx(name)
		}
	}
	if len(tm.EnumStrValue) > 0 {
		p.enums = tm.EnumStrValueMap()
	}
	return p
}

func (p projection) event(spec TableSpec, row []any, skipped []int) Event {
	ev := Event{
		Schema:    spec.Schema,
		Table:     spec.Table,
		EventID:   p.field(p.eventID, row, skipped),
		Key:       p.field(p.key, row, skipped),
		Topic:     p.field(p.topic, row, skipped),
		Payload:   p.field(p.payload, row, skipped),
		EventType: p.field(p.eventType, row, skipped),
		Headers:   p.field(p.headers, row, skipped),
	}
	ev.ID = p.idText(row, skipped)
	if p.timestamp != -2 {
		ev.Timestamp = p.timeField(p.timestamp, row, skipped)
	}
	if p.partition != -2 {
		ev.Partition = p.field(p.partition, row, skipped)
	}
	if len(p.extra) > 0 {
		ev.Extra = make([]Field, len(p.extra))
		for i, c := range p.extra {
			ev.Extra[i] = p.field(c, row, skipped)
		}
	}
	return ev
}

// idText is the id column's value as text, "" when absent or NULL. An integer id (the common
// AUTO_INCREMENT BIGINT) is formatted straight into its string: one allocation a row fewer than
// the Field's bytes and their copy.
func (p projection) idText(row []any, skipped []int) string {
	if p.id >= 0 && p.id < len(row) && !slices.Contains(skipped, p.id) && (p.enums == nil || !p.tm.IsEnumColumn(p.id)) {
		switch x := row[p.id].(type) {
		case int64:
			return strconv.FormatInt(x, 10)
		case uint64:
			return strconv.FormatUint(x, 10)
		case int32:
			return strconv.FormatInt(int64(x), 10)
		case uint32:
			return strconv.FormatUint(uint64(x), 10)
		}
	}
	if f := p.field(p.id, row, skipped); !f.Missing && !f.Null {
		return string(f.Bytes)
	}
	return ""
}

// field extracts column i. A column absent from the row image (binlog_row_image=MINIMAL for an
// INSERT that did not set it) is reported as Missing, like a column the table lacks.
func (p projection) field(i int, row []any, skipped []int) Field {
	if i < 0 || i >= len(row) {
		return Field{Missing: true}
	}
	for _, s := range skipped {
		if s == i {
			return Field{Missing: true}
		}
	}
	v := row[i]
	if n, ok := v.(int64); ok && p.enums != nil && p.tm.IsEnumColumn(i) {
		// ENUM values are logged as their 1-based index; FULL metadata carries the labels.
		if labels := p.enums[i]; n >= 1 && int(n) <= len(labels) {
			return Field{Bytes: []byte(labels[n-1])}
		}
	}
	f := valueField(v)
	if !f.Null && i < len(p.tm.ColumnType) && p.tm.ColumnType[i] == mysql.MYSQL_TYPE_JSON {
		// MySQL's binary JSON: print it with MySQL's own spacing. (MariaDB's JSON is LONGTEXT
		// and arrives as the text inserted.)
		f.Bytes = mysqlJSONSpacing(f.Bytes)
	}
	return f
}

// valueField is the one conversion from a decoded binlog value to a Field. Byte values are
// passed through without copying: go-mysql allocates every event's buffer afresh (packets and
// file reads are copied out of its pools), so nothing overwrites them later.
func valueField(v any) Field {
	switch x := v.(type) {
	case nil:
		return Field{Null: true}
	case []byte:
		if x == nil {
			x = []byte{}
		}
		return Field{Bytes: x}
	case string:
		// go-mysql returns VARCHAR/CHAR, TEXT and JSON text as strings aliasing the event's
		// buffer, which nothing overwrites (above), so they are viewed as bytes without a copy,
		// as byte values are. Nothing downstream writes into a Field's bytes (the capacity is
		// the length: an append copies). The 100-row catch-up copied every 1 KiB TEXT payload
		// here: 10% of its allocated objects.
		if x == "" {
			return Field{Bytes: []byte{}}
		}
		return Field{Bytes: unsafe.Slice(unsafe.StringData(x), len(x))}
	case int8:
		return Field{Bytes: strconv.AppendInt(nil, int64(x), 10)}
	case int16:
		return Field{Bytes: strconv.AppendInt(nil, int64(x), 10)}
	case int32:
		return Field{Bytes: strconv.AppendInt(nil, int64(x), 10)}
	case int64:
		return Field{Bytes: strconv.AppendInt(nil, x, 10)}
	case int:
		return Field{Bytes: strconv.AppendInt(nil, int64(x), 10)}
	case uint8:
		return Field{Bytes: strconv.AppendUint(nil, uint64(x), 10)}
	case uint16:
		return Field{Bytes: strconv.AppendUint(nil, uint64(x), 10)}
	case uint32:
		return Field{Bytes: strconv.AppendUint(nil, uint64(x), 10)}
	case uint64:
		return Field{Bytes: strconv.AppendUint(nil, x, 10)}
	case float32:
		return Field{Bytes: strconv.AppendFloat(nil, float64(x), 'g', -1, 32)}
	case float64:
		return Field{Bytes: strconv.AppendFloat(nil, x, 'g', -1, 64)}
	case time.Time: // DATETIME/TIMESTAMP with ParseTime, printed as MySQL prints them
		return Field{Bytes: x.AppendFormat(nil, "2006-01-02 15:04:05.999999")}
	case fmt.Stringer: // decimal.Decimal with UseDecimal, *JsonDiff
		return Field{Bytes: []byte(x.String())}
	default:
		return Field{Bytes: fmt.Append(nil, x)}
	}
}

// mariadbGTID formats a MariaDB GTID as the server prints it (gtid.FormatMariaDB: one
// allocation; fmt.Sprintf was ~1.5% of a 1-row catch-up's CPU).
func mariadbGTID(domain, server uint32, seq uint64) string {
	return gtid.FormatMariaDB(domain, server, seq)
}

// mysqlGTID formats a MySQL GTID event as the server prints it: "uuid:N" or "uuid:tag:N".
func mysqlGTID(e *replication.GTIDEvent) (string, error) {
	u, err := uuid.FromBytes(e.SID)
	if err != nil {
		return "", fmt.Errorf("GTID event with a malformed source id: %w", err)
	}
	if tag := e.Tag.String(); tag != "" {
		return u.String() + ":" + tag + ":" + strconv.FormatInt(e.GNO, 10), nil
	}
	return u.String() + ":" + strconv.FormatInt(e.GNO, 10), nil
}

// mysqlCommitTime prefers MySQL 8's microsecond immediate_commit_timestamp over the header's
// whole seconds (which is the statement's start, not its commit, for long transactions).
func mysqlCommitTime(e *replication.GTIDEvent, h *replication.EventHeader) time.Time {
	if e.ImmediateCommitTimestamp != 0 {
		return time.UnixMicro(int64(e.ImmediateCommitTimestamp)).UTC()
	}
	return time.Unix(int64(h.Timestamp), 0).UTC()
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
