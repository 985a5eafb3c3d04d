package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
)

// CheckCleanupWriter: the cleanup writer is a writable primary; see servercheck.CleanupWriter.
const CheckCleanupWriter = servercheck.CleanupWriter

// Why a writer is not a writable primary: the reason label of outboxd_cleanup_stopped.
const (
	WriterReadOnly   = "read_only"
	WriterReplica    = "replica"
	WriterUnverified = "unverified" // the account may not read the replication status
)

// erSpecificAccessDenied is "Access denied; you need (at least one of) the ... privilege(s)".
const erSpecificAccessDenied = 1227

// InspectCleanupWriter verifies that db is a writable primary for cleanup: read_only OFF (and
// on MySQL super_read_only OFF), and no replication configured (MariaDB: SHOW ALL SLAVES
// STATUS lists no connection; MySQL: SHOW REPLICA STATUS lists no channel), running or
// stopped: a stopped replica started again would break on what cleanup deleted. It returns
// nil when the writer is fine, else the problem and its reason (WriterReadOnly, WriterReplica,
// or WriterUnverified when the account lacks the privilege to read the replication status:
// never a silent pass). It blocks on one batch of up to four queries; an error means the
// server could not be inspected (the connection failed), not that it is a replica.
func InspectCleanupWriter(ctx context.Context, db *sql.DB, f gtid.Flavor) (p *Problem, reason string, err error) {
	ro, err := ReadOnly(ctx, db)
	if err != nil {
		return nil, "", err
	}
	roVar := "read_only"
	if !ro && f == gtid.MySQL {
		var sro int
		if err := db.QueryRowContext(ctx, "SELECT @@global.super_read_only").Scan(&sro); err != nil {
			return nil, "", fmt.Errorf("read @@super_read_only: %w", err)
		}
		ro, roVar = sro != 0, "super_read_only"
	}
	if ro {
		return &Problem{
			Setting: roVar, Check: CheckCleanupWriter,
			Found: "ON on the cleanup writer (a replica?); cleanup deletes delivered rows there",
			Fix:   writerFix,
		}, WriterReadOnly, nil
	}
	conns, err := replicaConnections(ctx, db, f)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == erSpecificAccessDenied:
		user, uerr := currentUser(ctx, db)
		if uerr != nil {
			return nil, "", uerr
		}
		priv := "SLAVE MONITOR" // MariaDB 10.5.9+; REPLICATION CLIENT (BINLOG MONITOR) no longer covers it
		if f == gtid.MySQL {
			priv = "REPLICATION CLIENT"
		}
		grant := "GRANT " + priv + " ON *.* TO " + user
		return &Problem{
			Setting: priv, Check: CheckCleanupWriter,
			Found: "not granted to " + user + " (cleanup must see that the writer is no replica before it deletes: " + me.Message + ")",
			Fix:   grant + "; or turn cleanup off",
		}, WriterUnverified, nil
	case err != nil:
		return nil, "", err
	case len(conns) > 0:
		return &Problem{
			Setting: "replication", Check: CheckCleanupWriter,
			Found: "configured on the cleanup writer (" + strings.Join(conns, "; ") + "): it is a replica, and a DELETE there breaks its replication",
			Fix:   writerFix,
		}, WriterReplica, nil
	}
	return nil, "", nil
}

const writerFix = "set checkpoint.writer_addr to the writable primary (cleanup deletes on checkpoint.writer_addr, default source.addr, " +
	"and outboxd may read the binlog from a replica), or turn cleanup off"

// replicaConnections describes each replication connection (MariaDB) or channel (MySQL)
// configured on db, running or not.
func replicaConnections(ctx context.Context, db *sql.DB, f gtid.Flavor) ([]string, error) {
	q := "SHOW ALL SLAVES STATUS"
	if f == gtid.MySQL {
		q = "SHOW REPLICA STATUS"
	}
	rows, err := db.QueryContext(ctx, q)
	var me *mysql.MySQLError
	if f == gtid.MySQL && errors.As(err, &me) && me.Number == 1064 {
		// Before MySQL 8.0.22 (a syntax error): the old name.
		q = "SHOW SLAVE STATUS"
		rows, err = db.QueryContext(ctx, q)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var out []string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		var desc []string
		for i, c := range cols {
			switch c {
			case "Connection_name", "Channel_Name":
				desc = append(desc, fmt.Sprintf("connection '%s'", vals[i]))
			case "Master_Host", "Source_Host", "Master_Port", "Source_Port",
				"Slave_IO_Running", "Replica_IO_Running", "Slave_SQL_Running", "Replica_SQL_Running":
				desc = append(desc, c+" "+string(vals[i]))
			}
		}
		out = append(out, strings.Join(desc, ", "))
	}
	return out, rows.Err()
}

// Replicates reports whether db has replication configured (a replica, running or stopped): its
// rows lag its primary's. It blocks on one query; an error (such as a missing SLAVE MONITOR or
// REPLICATION CLIENT) means it could not tell.
func Replicates(ctx context.Context, db *sql.DB, f gtid.Flavor) (bool, error) {
	conns, err := replicaConnections(ctx, db, f)
	return len(conns) > 0, err
}
