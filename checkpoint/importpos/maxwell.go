package importpos

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// Maxwell keeps its position in the table positions of its schema database (schema_database,
// default maxwell) with the columns server_id, binlog_file, binlog_position, gtid_set,
// client_id, heartbeat_at and last_heartbeat_read, one row per client_id and server_id (Maxwell
// docs, "Configuration": client_id, gtid_mode, schema_database; MysqlPositionStore.set, which
// writes server_id 0 in gtid_mode). A producer moves the position only at a transaction's commit
// row (RowMap.isTXCommit) and only once the broker acknowledged every message up to it
// (InflightMessageList), so gtid_set is the executed set through the last transaction Maxwell
// delivered in full.

var identRE = regexp.MustCompile(`^[A-Za-z0-9_$]+$`)

// ReadMaxwell reads the positions row of clientID from schema.positions over db. serverID < 0
// accepts any server_id, as long as the client has one row. It blocks on the query.
func ReadMaxwell(ctx context.Context, db *sql.DB, schema, clientID string, serverID int64) (Position, error) {
	if !identRE.MatchString(schema) {
		return Position{}, fmt.Errorf("maxwell: schema %q is not a plain database name", schema)
	}
	q := "SELECT server_id, COALESCE(binlog_file, ''), COALESCE(binlog_position, 0), COALESCE(gtid_set, '') FROM `" + schema + "`.positions WHERE client_id = ?"
	args := []any{clientID}
	if serverID >= 0 {
		q += " AND server_id = ?"
		args = append(args, serverID)
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return Position{}, fmt.Errorf("maxwell: read %s.positions (the account needs SELECT on it): %w", schema, err)
	}
	defer rows.Close()
	type row struct {
		serverID int64
		file     string
		pos      int64
		gtids    string
	}
	var found []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.serverID, &r.file, &r.pos, &r.gtids); err != nil {
			return Position{}, fmt.Errorf("maxwell: read %s.positions: %w", schema, err)
		}
		found = append(found, r)
	}
	if err := rows.Err(); err != nil {
		return Position{}, fmt.Errorf("maxwell: read %s.positions: %w", schema, err)
	}
	switch {
	case len(found) == 0 && serverID >= 0:
		return Position{}, fmt.Errorf("maxwell: %s.positions has no row for client_id %q and server_id %d", schema, clientID, serverID)
	case len(found) == 0:
		return Position{}, fmt.Errorf("maxwell: %s.positions has no row for client_id %q: check --client-id (Maxwell's client_id, default maxwell) and --maxwell-schema", schema, clientID)
	case len(found) > 1:
		var ids []string
		for _, r := range found {
			ids = append(ids, fmt.Sprint(r.serverID))
		}
		return Position{}, fmt.Errorf("maxwell: %s.positions has %d rows for client_id %q (server_id %s): pass --server-id to pick one (0 is Maxwell's gtid_mode row)",
			schema, len(found), clientID, strings.Join(ids, ", "))
	}
	r := found[0]
	return Position{Tool: Maxwell, Where: fmt.Sprintf("of client_id %s (server_id %d)", clientID, r.serverID),
		GTIDSet: strings.TrimSpace(r.gtids), File: r.file, Pos: r.pos}, nil
}
