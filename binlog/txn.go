package binlog

import "time"

// Txn is one committed transaction read from the binlog. It is the unit of progress: positions
// are only ever recorded at a Txn's end, never inside it.
type Txn struct {
	// GTID is this transaction's own GTID in the server's notation ("0-1-42", "uuid:7",
	// "uuid:tag:3"). Empty for anonymous transactions (gtid_mode=OFF, only seen in files).
	// Consumers rebuild the executed set by adding GTIDs in order to the start set (cheaper
	// than cloning a set per transaction).
	GTID string
	// CommitTime is when the source committed (MySQL 8: immediate_commit_timestamp, microsecond
	// precision; MariaDB and MySQL 5.7: the event header's whole seconds).
	CommitTime time.Time
	// CommitTimePrecise is set when CommitTime has sub-second precision (MySQL 8's
	// immediate_commit_timestamp). Without it CommitTime is whole seconds, which is too coarse
	// to measure a commit-to-acknowledgement latency of milliseconds.
	CommitTimePrecise bool
	// Partial is set on a piece of a large transaction: more events of the same transaction
	// (same GTID) follow in later Txn values, and only the last piece, with Partial unset,
	// completes it. Pieces let a transaction of any size stream through bounded memory; the
	// position fields below are set on the last piece only.
	Partial bool
	// File and Pos are the binlog coordinates just past the transaction's last event.
	File string
	Pos  uint32
	// XA is set on the steps of an XA transaction (see xa.go): the prepared group (and its
	// pieces), whose rows must wait for the XA COMMIT group, and that XA COMMIT or XA ROLLBACK
	// group. Nil for every other transaction, including a one-phase XA that MariaDB writes as
	// an ordinary group.
	XA *XAStep
	// OnlyCheckpoint is set on a transaction whose rows were all in outboxd's own checkpoint
	// table (AssemblerConfig.CheckpointTable): a save of the mysql store read back. It is no
	// outbox progress (own.go).
	OnlyCheckpoint bool
	// Layouts is set on a transaction holding a DDL statement that names outbox tables, when a
	// ColumnResolver is configured and AssemblerConfig.RecordLayouts is set: each such table's
	// columns as the resolver read them right after the statement (nil columns when they could
	// not be read). Rows after this transaction are read with them.
	Layouts map[TableRef][]Column
	// Events are the INSERTs into configured outbox tables, in binlog order. Empty for
	// transactions that touch no outbox table: those still move the position.
	Events []Event
	// Updates are the UPDATEd rows (their new image) of outbox tables whose TableSpec has
	// WatchUpdates; they are never delivered, only reported (tables[].on_update).
	Updates []Event
}

// Event is one row inserted into an outbox table, projected onto the configured columns.
type Event struct {
	// Schema and Table name the outbox table.
	Schema, Table string
	// ID is the row's "id" column rendered as text, when the table has one; only for messages
	// to operators.
	ID string
	// The configured columns. A column that the table lacks has Missing set.
	EventID, Key, Topic, Payload, EventType, Headers Field
	// PK is the row's primary key, one value per key column in key order, as go-mysql decoded
	// it (int64, string, []byte, ...; strings and bytes may alias the event's buffer), from the
	// TABLE_MAP's primary-key metadata (binlog_row_metadata=FULL). Only for a TableSpec with
	// PrimaryKey set (cleanup deletes by it); nil otherwise, or when the TABLE_MAP names no key.
	PK []any
	// Timestamp and Partition are the optional columns.timestamp and columns.partition (zero
	// when not configured). A TIMESTAMP column's value is its epoch milliseconds as text (it is
	// absolute); a DATETIME's is its wall-clock text, read in the table's zone by the router.
	Timestamp, Partition Field
	// Extra are the extra_headers columns, in ColumnNames.Extra's order.
	Extra []Field
}

// Field is one column value of an outbox row.
type Field struct {
	// Bytes is the value as text or raw bytes (BLOB/VARBINARY are passed through unchanged).
	// Nothing writes into them once the Field is made: they may alias the binlog event's
	// buffer, and the router views them as strings without a copy.
	Bytes []byte
	// Null is true for SQL NULL.
	Null bool
	// Missing is true when the table has no such column.
	Missing bool
}

// Size approximates the event's memory footprint in bytes.
func (e *Event) Size() int {
	return len(e.Schema) + len(e.Table) + len(e.ID) + len(e.EventID.Bytes) + len(e.Key.Bytes) +
		len(e.Topic.Bytes) + len(e.Payload.Bytes) + len(e.EventType.Bytes) + len(e.Headers.Bytes) +
		len(e.Timestamp.Bytes) + len(e.Partition.Bytes) + extraSize(e.Extra)
}

func extraSize(fs []Field) int {
	n := 0
	for _, f := range fs {
		n += len(f.Bytes)
	}
	return n
}
