// Package servercheck is the vocabulary of outboxd's start-up checks of a server: the stable
// check names, the Problem a check reports and the Column definition the table checks read.
// It is a leaf (standard library only) so that config can validate source.skip_checks and
// report column-type problems without importing the MySQL client that preflight runs
// the checks with; preflight re-exports these names for its callers.
package servercheck

import "fmt"

// Stable check names: what Problem.Check holds and source.skip_checks takes. The variable
// checks are named after their variable.
const (
	Flavor            = "flavor"
	LogBin            = "log_bin"
	BinlogFormat      = "binlog_format"
	BinlogRowImage    = "binlog_row_image"
	BinlogRowMetadata = "binlog_row_metadata"
	ServerID          = "server_id"
	GTIDMode          = "gtid_mode"
	EnforceGTID       = "enforce_gtid_consistency"
	GTIDStrictMode    = "gtid_strict_mode"
	ReplicationSlave  = "replication_slave"
	ReplicationClient = "replication_client"
	TableSelect       = "table_select"
	TableExists       = "table_exists"
	TableColumns      = "table_columns"

	// BinlogRetention is the check that the server keeps its binlogs at least
	// source.min_binlog_retention (a warning: outboxd runs, but an outage longer than the
	// retention loses the binlogs it still needs).
	BinlogRetention = "binlog_retention"

	// The mysql checkpoint store's checks (run on checkpoint.writer_addr).

	// CheckpointTable: the checkpoint table exists with every column the store writes.
	CheckpointTable = "checkpoint_table"
	// CheckpointGrants: the account may SELECT, INSERT and UPDATE the checkpoint table.
	CheckpointGrants = "checkpoint_grants"
	// CheckpointWriter: checkpoint.writer_addr is writable (not read_only): the row and the
	// leader lock must live on the primary, since neither a lock nor a row written elsewhere
	// reaches the other servers.
	CheckpointWriter = "checkpoint_writer"

	// The cleanup checks (run on the writer when cleanup is on).

	// CleanupWriter: the cleanup writer (checkpoint.writer_addr, default source.addr) is a
	// writable primary: not read-only and not a replica. A DELETE on a replica whose
	// read_only is OFF (the default) succeeds there under the replica's own server id; the
	// replica then stops on the primary's next transaction (GTID out of order under
	// gtid_strict_mode) and nothing new reaches outboxd from it.
	CleanupWriter = "cleanup_writer"
	// CleanupGrants: the account may DELETE from each cleaned outbox table.
	CleanupGrants = "cleanup_grants"
	// CleanupTable: each cleaned table has a primary key and, when configured, its
	// created_at column is a DATETIME or TIMESTAMP.
	CleanupTable = "cleanup_table"
	// CleanupHold: cleanup.hold_table is set, which is no longer used (a warning).
	CleanupHold = "cleanup_hold"
)

// Names returns every check name, in the order the server inspection runs them. Pure.
func Names() []string {
	return []string{
		Flavor, LogBin, BinlogFormat, BinlogRowImage, BinlogRowMetadata,
		ServerID, GTIDMode, EnforceGTID, GTIDStrictMode, BinlogRetention, ReplicationSlave,
		ReplicationClient, TableSelect, TableExists, TableColumns,
		CheckpointTable, CheckpointGrants, CheckpointWriter,
		CleanupWriter, CleanupGrants, CleanupTable, CleanupHold,
	}
}

// Problem is one way the server or the connecting account is not set up for outboxd.
type Problem struct {
	Setting string // the variable, privilege or object: "binlog_format", "REPLICATION SLAVE", "table app.outbox"
	Found   string // what the server has now
	Fix     string // exactly what to change: the statement to run and the my.cnf line
	// Warning marks a soft problem: outboxd runs, with a stated cost.
	Warning bool
	// Check is the stable name of the check that found it (one of Names), the name
	// source.skip_checks takes.
	Check string
	// Skipped marks a problem found by a check the request skips: reported, not fatal.
	Skipped bool
	// Table is the outbox table ("schema.table") a table check is about; "" for the others.
	Table string
}

func (p Problem) String() string {
	kind := "problem"
	if p.Warning {
		kind = "warning"
	}
	return fmt.Sprintf("%s: %s is %s; fix: %s", kind, p.Setting, p.Found, p.Fix)
}

// Column is one column as information_schema.COLUMNS describes it. The binlog reader compares
// it with the types in each TABLE_MAP (binlog.Column).
type Column struct {
	Name string
	// DataType is DATA_TYPE ("varchar", "longtext", "enum"); COLUMN_TYPE ("varchar(64)",
	// "int(10) unsigned") is for messages.
	DataType, ColumnType string
	// OctetLength is CHARACTER_OCTET_LENGTH, Precision and Scale NUMERIC_PRECISION and
	// NUMERIC_SCALE, FracDigits DATETIME_PRECISION; -1 where information_schema has NULL.
	OctetLength, Precision, Scale, FracDigits int64
}
