// Package startpos decides where the relay starts reading (the checkpoint, --from-gtid or
// source.start) and whether the server can serve that position: not ahead of what it wrote,
// not in binlogs it purged, not lacking a source it has. It asks the server through Server,
// so the rules are tested without one.
package startpos

import (
	"context"
	"database/sql"
	"strings"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
)

// Server is what start resolution needs to know of the source server. Implementations block
// on queries and return the server's error unwrapped (the caller adds what it was checking);
// they must be safe for concurrent use.
type Server interface {
	// Position is the executed set: MySQL @@gtid_executed, MariaDB @@gtid_binlog_pos.
	Position(ctx context.Context, f gtid.Flavor) (gtid.Set, error)
	// Purged is what the binlogs no longer hold, as server.Purged returns it.
	Purged(ctx context.Context, f gtid.Flavor) (gtid.Set, error)
	// BinlogState is MariaDB's @@gtid_binlog_state and whether gtid_strict_mode is on.
	BinlogState(ctx context.Context) (state string, strict bool, err error)
}

// SQL is the Server behind a connection pool to the source. Safe for concurrent use.
type SQL struct{ DB *sql.DB }

var _ Server = SQL{}

// Position is server.Position.
func (s SQL) Position(ctx context.Context, f gtid.Flavor) (gtid.Set, error) {
	return server.Position(ctx, s.DB, f)
}

// Purged is server.Purged.
func (s SQL) Purged(ctx context.Context, f gtid.Flavor) (gtid.Set, error) {
	return server.Purged(ctx, s.DB, f)
}

// BinlogState reads @@GLOBAL.gtid_binlog_state and @@GLOBAL.gtid_strict_mode in one query.
func (s SQL) BinlogState(ctx context.Context) (string, bool, error) {
	var state string
	var strict sql.NullString
	if err := s.DB.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_strict_mode").Scan(&state, &strict); err != nil {
		return "", false, err
	}
	return state, strict.String == "1" || strings.EqualFold(strict.String, "ON"), nil
}
