// Package importpos reads the position another binlog relay saved (Debezium's offset record,
// Maxwell's positions row, Canal's client cursor) and maps it to the GTID set an outboxd
// checkpoint holds: the executed set through the last transaction the tool delivered in full.
// It maps only what is exact: a position without a GTID set is refused (NoGTIDError) with how
// to get one, except where the binlog file and offset stand at a transaction boundary and the
// server can name the GTID state there (MariaDB's BINLOG_GTID_POS, see Position.Boundary).
package importpos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/gtid"
)

// Tool names the relay a position comes from, as --from spells it.
type Tool string

const (
	Debezium Tool = "debezium"
	Maxwell  Tool = "maxwell"
	Canal    Tool = "canal"
)

// Position is a tool's saved position reduced to what outboxd can use.
type Position struct {
	Tool Tool
	// Where says which record it came from (connector and topic prefix, client id, destination).
	Where string
	// GTIDSet is the executed set through the last transaction the tool delivered completely;
	// "" when the tool saved none.
	GTIDSet string
	// File and Pos are the binlog coordinates the tool saved beside it ("" and 0 when none).
	File string
	Pos  int64
	// Boundary: File:Pos is the start of the next transaction after the last delivered one, so
	// the server's GTID state at that offset is exactly the position (Debezium only).
	Boundary bool
	// Partial, when not "", says that a transaction after GTIDSet was partly delivered: outboxd
	// sends all its rows again (duplicates, never a loss).
	Partial string
}

// ErrNoGTID is what a NoGTIDError matches (errors.Is).
var ErrNoGTID = errors.New("the saved position has no GTID set")

// NoGTIDError refuses a file/position-only position: outboxd's checkpoint is a GTID set, and a
// binlog offset is not one unless the server maps it exactly.
type NoGTIDError struct {
	Pos Position
	// Hint says how to get a position with GTIDs from this tool.
	Hint string
}

func (e *NoGTIDError) Error() string {
	return fmt.Sprintf("%s position %s holds binlog file %q offset %d and no GTID set: outboxd's checkpoint is a GTID set and a file offset is not mapped by guessing. %s",
		e.Pos.Tool, e.Pos.Where, e.Pos.File, e.Pos.Pos, e.Hint)
}

func (e *NoGTIDError) Is(target error) bool { return target == ErrNoGTID }

// hintCommon is the way to a GTID set that works whatever the tool.
const hintCommon = "Or stop the tool, find the GTID of the last transaction it delivered (mysqlbinlog or SHOW BINLOG EVENTS around that offset) and write the executed set through it with outboxd checkpoint set --gtid SET."

// Set parses p's GTID set in the source's flavor. A position without one is a NoGTIDError. It
// does not block.
func (p Position) Set(f gtid.Flavor) (gtid.Set, error) {
	if p.GTIDSet == "" {
		return gtid.Set{}, &NoGTIDError{Pos: p, Hint: p.hint()}
	}
	s, err := gtid.Parse(f, p.GTIDSet)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("%s position %s: its GTID set %q is not a %s set (source.flavor): %w", p.Tool, p.Where, p.GTIDSet, f, err)
	}
	return s, nil
}

func (p Position) hint() string {
	switch p.Tool {
	case Debezium:
		return "Enable GTIDs on the server (MySQL: gtid_mode=ON, enforce_gtid_consistency=ON; MariaDB always has them) and let the connector stream at least one transaction so its offset records gtids; " +
			"on MariaDB, --binlog-gtid-pos asks the server for the GTID state at the offset (BINLOG_GTID_POS), which is exact for Debezium's offset. " + hintCommon
	case Maxwell:
		return "Enable GTIDs on the server and run Maxwell with gtid_mode=true until it has delivered a transaction, so its positions row has gtid_set. " + hintCommon
	case Canal:
		return "Enable GTIDs on the server and set canal.instance.gtidon=true, then let Canal deliver a transaction so its cursor records gtid. " + hintCommon
	}
	return hintCommon
}

// FromBinlogOffset fills p's GTID set from the MariaDB server's GTID state at p's binlog file
// and offset (SELECT BINLOG_GTID_POS(file, offset), MariaDB documentation of BINLOG_GTID_POS),
// for a position saved without GTIDs. That state is the executed set through the last
// transaction before the offset: exact only at a transaction boundary, so a position that is
// not one (p.Boundary false) is refused, as is a MySQL source (it has no such function). It
// blocks on the query.
func FromBinlogOffset(ctx context.Context, db *sql.DB, f gtid.Flavor, p Position) (Position, error) {
	if f != gtid.MariaDB {
		return Position{}, fmt.Errorf("--binlog-gtid-pos needs a MariaDB source (BINLOG_GTID_POS); source.flavor is %s", f)
	}
	if !p.Boundary || p.File == "" {
		return Position{}, fmt.Errorf("--binlog-gtid-pos: %s saves its binlog offset inside a transaction (or none), where no GTID state maps to it exactly: %w",
			p.Tool, &NoGTIDError{Pos: p, Hint: p.hint()})
	}
	var state sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", p.File, p.Pos).Scan(&state); err != nil {
		return Position{}, fmt.Errorf("--binlog-gtid-pos: BINLOG_GTID_POS(%q, %d): %w", p.File, p.Pos, err)
	}
	if !state.Valid {
		return Position{}, fmt.Errorf("--binlog-gtid-pos: the server has no binlog position %s:%d (BINLOG_GTID_POS is NULL: the file was purged, or the offset is not in it)", p.File, p.Pos)
	}
	p.GTIDSet = state.String
	return p, nil
}
