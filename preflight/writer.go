package preflight

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/server"
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
	ro, err := server.ReadOnly(ctx, db)
	if err != nil {
		return nil, "", err
	}
	roVar := "read_only"
	if !ro && f == gtid.MySQL {
		sro, err := server.SuperReadOnly(ctx, db)
		if err != nil {
			return nil, "", err
		}
		ro, roVar = sro, "super_read_only"
	}
	if ro {
		return &Problem{
			Setting: roVar, Check: CheckCleanupWriter,
			Found: "ON on the cleanup writer (a replica?); cleanup deletes delivered rows there",
			Fix:   writerFix,
		}, WriterReadOnly, nil
	}
	conns, err := server.ReplicaConnections(ctx, db, f)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == erSpecificAccessDenied:
		user, uerr := server.CurrentUser(ctx, db)
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
