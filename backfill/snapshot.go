package backfill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

// Snapshot is an open consistent-snapshot transaction on one connection and the GTID position
// that holds exactly the transactions it sees: every row a SELECT in it returns was committed by
// a transaction in Position, and every transaction in Position is visible to it. A binlog reader
// started from Position therefore delivers exactly the transactions the snapshot does not see.
type Snapshot struct {
	// Position is the executed GTID set of the snapshot.
	Position gtid.Set
	// Method says how Position was tied to the snapshot, for the operator's output:
	// "binlog_snapshot" (MariaDB), "log_status" or "flush_tables_with_read_lock" (MySQL).
	Method string
	// File and Pos are the binlog coordinates of the snapshot where the server tells them
	// (MariaDB's binlog_snapshot_file/position); empty otherwise.
	File string
	Pos  uint64
	// At is when the snapshot was taken (the local clock).
	At time.Time
	// Note is a caveat for the operator, "" when there is none.
	Note string
}

// SnapshotOptions tune OpenSnapshot.
type SnapshotOptions struct {
	// LockWait bounds the wait for FLUSH TABLES WITH READ LOCK (MySQL's fallback), through
	// lock_wait_timeout: while it waits, new writes queue behind it. Default 10s.
	LockWait time.Duration
	// Attempts is how many times MySQL's log_status method is tried before the fallback
	// (default 20).
	Attempts int
	// NoLock forbids MySQL's FLUSH TABLES WITH READ LOCK fallback: OpenSnapshot then fails when
	// log_status cannot be used or keeps changing.
	NoLock bool
}

// Privilege hints, named in errors, check and docs/operations/backfill.md.
const (
	// MySQLLogStatusPrivilege is what the lock-free MySQL method needs.
	MySQLLogStatusPrivilege = "BACKUP_ADMIN (to read performance_schema.log_status)"
	// MySQLLockPrivilege is what the MySQL fallback needs.
	MySQLLockPrivilege = "RELOAD (for a brief FLUSH TABLES WITH READ LOCK)"
	// MySQLXARecoverPrivilege is what the check for prepared XA transactions needs (xa.go).
	MySQLXARecoverPrivilege = "XA_RECOVER_ADMIN (for XA RECOVER: a prepared XA transaction refuses the backfill)"
)

// OpenSnapshot starts a read-only REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT on conn and
// finds its GTID position. On success the transaction stays open (every query on conn reads the
// snapshot) until the caller ends it with ROLLBACK (EndSnapshot). On error no transaction and no
// lock is left on conn. It blocks on a few queries (MySQL: possibly a brief global read lock,
// see mysqlSnapshot). conn must not be used concurrently.
func OpenSnapshot(ctx context.Context, conn *sql.Conn, flavor gtid.Flavor, o SnapshotOptions) (Snapshot, error) {
	if o.LockWait <= 0 {
		o.LockWait = 10 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 20
	}
	// WITH CONSISTENT SNAPSHOT means something only under REPEATABLE READ; the session default
	// may be another level.
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return Snapshot{}, fmt.Errorf("set isolation level: %w", err)
	}
	xa, err := preparedXA(ctx, conn)
	if err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	switch flavor {
	case gtid.MariaDB:
		s, err = mariadbSnapshot(ctx, conn)
	case gtid.MySQL:
		s, err = mysqlSnapshot(ctx, conn, o)
	default:
		err = fmt.Errorf("unknown flavor %q", flavor)
	}
	if err == nil {
		// See xa.go: a transaction prepared before the snapshot and committed after it would
		// be in neither the snapshot nor the binlog after its position.
		var after []string
		if after, err = preparedXA(ctx, conn); err == nil && len(xa)+len(after) > 0 {
			err = errPreparedXA(union(xa, after))
		}
	}
	if err != nil {
		EndSnapshot(conn)
		return Snapshot{}, err
	}
	s.At = time.Now()
	return s, nil
}

// EndSnapshot ends the snapshot transaction (and any lock left by a failed attempt). It does not
// use the caller's context, so it also runs when that ended. Errors are ignored: the connection
// is closed by the caller afterwards, which ends both anyway.
func EndSnapshot(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	_, _ = conn.ExecContext(ctx, "UNLOCK TABLES")
}

// startSnapshot has no READ ONLY: the session only reads anyway, and Dolt rejects the two
// characteristics together.
const startSnapshot = "START TRANSACTION WITH CONSISTENT SNAPSHOT"

// mariadbSnapshot: MariaDB (since 5.3) ties the InnoDB read view of START TRANSACTION WITH
// CONSISTENT SNAPSHOT to the binlog through its group commit, and reports that point in the
// session status binlog_snapshot_file / binlog_snapshot_position: the binlog offset just after
// the last transaction the snapshot sees. BINLOG_GTID_POS turns the offset into the GTID position
// (every domain, from the file's Gtid_list plus the GTIDs up to the offset). No lock and no
// privilege beyond SELECT on the table.
func mariadbSnapshot(ctx context.Context, conn *sql.Conn) (Snapshot, error) {
	if _, err := conn.ExecContext(ctx, startSnapshot); err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", startSnapshot, err)
	}
	rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return Snapshot{}, fmt.Errorf("read binlog_snapshot_file/position: %w", err)
	}
	var s Snapshot
	var havePos bool
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return Snapshot{}, fmt.Errorf("read binlog_snapshot_file/position: %w", err)
		}
		switch strings.ToLower(name) {
		case "binlog_snapshot_file":
			s.File = value
		case "binlog_snapshot_position":
			if _, err := fmt.Sscan(value, &s.Pos); err != nil {
				rows.Close()
				return Snapshot{}, fmt.Errorf("binlog_snapshot_position %q: %w", value, err)
			}
			havePos = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("read binlog_snapshot_file/position: %w", err)
	}
	if s.File == "" || !havePos {
		return Snapshot{}, errors.New("the server reports no binlog_snapshot_file/position: is log_bin on? (outboxd needs the binlog anyway)")
	}
	var pos sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", s.File, s.Pos).Scan(&pos); err != nil {
		return Snapshot{}, fmt.Errorf("BINLOG_GTID_POS(%q, %d): %w", s.File, s.Pos, err)
	}
	if !pos.Valid {
		return Snapshot{}, fmt.Errorf("BINLOG_GTID_POS(%q, %d) is NULL: the server does not have that binlog offset", s.File, s.Pos)
	}
	set, err := gtid.Parse(gtid.MariaDB, pos.String)
	if err != nil {
		return Snapshot{}, fmt.Errorf("BINLOG_GTID_POS(%q, %d) = %q: %w", s.File, s.Pos, pos.String, err)
	}
	s.Position, s.Method = set, "binlog_snapshot"
	return s, nil
}

// errUnstable: commits kept landing between the two reads of log_status.
var errUnstable = errors.New("gtid_executed changed during every attempt")

// mysqlSnapshot: MySQL's START TRANSACTION WITH CONSISTENT SNAPSHOT reports no binlog position,
// and @@gtid_executed read before or after it can be off by the transactions committing in
// between: read before, a transaction whose InnoDB commit lands between the read and the
// snapshot would be sent twice; read after, one committed after the snapshot would be in the
// position but not in the snapshot: lost. Two methods close that gap, the first without a lock:
//
//  1. log_status (BACKUP_ADMIN, binlog_order_commits=ON, MySQL 8.4+): read G1 from
//     performance_schema.log_status, start the snapshot, read G2; keep the snapshot when G1 = G2,
//     else roll it back and try again. With binlog_order_commits the commit stage, under the
//     binlog's LOCK_commit, commits a group in InnoDB and then adds its GTIDs to gtid_executed
//     (Gtid_state::update_commit_group asserts that lock). So every GTID in G1 was committed in
//     InnoDB before the snapshot started: the snapshot sees it (no loss). In MySQL 8.4 a query
//     of log_status also waits for the commit group under way (the server's own test: a SELECT
//     on log_status waits on prep_xids_cond for an INSERT that holds the commit lock), so a
//     transaction the snapshot sees, committed in InnoDB before it, is in G2 = G1 (no overlap).
//     MySQL 8.0 takes only LOCK_log and the GTID state's lock for log_status (Bug #112331): a
//     transaction between its InnoDB commit and its GTID update could be seen by the snapshot
//     and be missing from G1 = G2, and be sent again by run. That is never a loss, but it is an
//     overlap, so before 8.4 this method is used only when the lock is forbidden (NoLock).
//     binlog_order_commits=OFF adds GTIDs before the InnoDB commit (a loss), so it is refused.
//  2. FLUSH TABLES WITH READ LOCK (RELOAD), as mysqldump --single-transaction --source-data does:
//     the global read lock blocks every commit, so under it START TRANSACTION WITH CONSISTENT
//     SNAPSHOT and @@gtid_executed agree; the lock is released right after (START TRANSACTION
//     does not release it; UNLOCK TABLES does). Its wait for running statements is bounded by
//     lock_wait_timeout (LockWait), since writes queue behind it meanwhile. Used when 1 is not
//     possible (no BACKUP_ADMIN, MySQL before 8.4, binlog_order_commits=OFF, a server without
//     log_status) or did not settle on a busy server, unless NoLock.
func mysqlSnapshot(ctx context.Context, conn *sql.Conn, o SnapshotOptions) (Snapshot, error) {
	var version string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return Snapshot{}, fmt.Errorf("read the server version: %w", err)
	}
	exact := atLeast(version, 8, 4)
	var s Snapshot
	err1 := fmt.Errorf("MySQL %s: performance_schema.log_status waits for commits in progress only from 8.4 on", version)
	if exact || o.NoLock {
		s, err1 = logStatusSnapshot(ctx, conn, o.Attempts)
		if err1 == nil {
			if !exact {
				s.Note = "MySQL " + version + " before 8.4 without the lock (--no-lock): a transaction committing as the snapshot was taken may be sent again by run"
			}
			return s, nil
		}
	}
	if ctx.Err() != nil {
		return Snapshot{}, ctx.Err()
	}
	if o.NoLock {
		return Snapshot{}, fmt.Errorf("MySQL snapshot without a lock (needs %s and binlog_order_commits=ON): %w", MySQLLogStatusPrivilege, err1)
	}
	EndSnapshot(conn)
	s, err2 := lockedSnapshot(ctx, conn, o.LockWait)
	if err2 != nil {
		return Snapshot{}, fmt.Errorf("MySQL snapshot: without a lock (needs %s and binlog_order_commits=ON): %w; with the fallback (needs %s): %w",
			MySQLLogStatusPrivilege, err1, MySQLLockPrivilege, err2)
	}
	return s, nil
}

// atLeast reports whether a VERSION() string ("8.4.3", "9.1.0-commercial") is major.minor or
// newer; a version it cannot read is not.
func atLeast(version string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(version, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func logStatusSnapshot(ctx context.Context, conn *sql.Conn, attempts int) (Snapshot, error) {
	var ordered sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_order_commits").Scan(&ordered); err != nil {
		return Snapshot{}, fmt.Errorf("read binlog_order_commits: %w", err)
	}
	if ordered.String != "1" && !strings.EqualFold(ordered.String, "ON") {
		return Snapshot{}, fmt.Errorf("binlog_order_commits is %q: InnoDB commits may then happen outside the commit lock log_status takes", ordered.String)
	}
	read := func() (string, error) {
		var v sql.NullString
		err := conn.QueryRowContext(ctx, "SELECT JSON_UNQUOTE(JSON_EXTRACT(LOCAL, '$.gtid_executed')) FROM performance_schema.log_status").Scan(&v)
		if err != nil {
			return "", fmt.Errorf("read performance_schema.log_status: %w", err)
		}
		return v.String, nil
	}
	for range attempts {
		g1, err := read()
		if err != nil {
			return Snapshot{}, err
		}
		if _, err := conn.ExecContext(ctx, startSnapshot); err != nil {
			return Snapshot{}, fmt.Errorf("%s: %w", startSnapshot, err)
		}
		g2, err := read()
		if err != nil {
			return Snapshot{}, err
		}
		if g1 == g2 {
			set, err := gtid.Parse(gtid.MySQL, compactSet(g1))
			if err != nil {
				return Snapshot{}, fmt.Errorf("log_status gtid_executed %q: %w", g1, err)
			}
			return Snapshot{Position: set, Method: "log_status"}, nil
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			return Snapshot{}, fmt.Errorf("roll back an unsettled snapshot: %w", err)
		}
	}
	return Snapshot{}, fmt.Errorf("%w (%d attempts)", errUnstable, attempts)
}

func lockedSnapshot(ctx context.Context, conn *sql.Conn, wait time.Duration) (Snapshot, error) {
	secs := max(1, int(wait.Round(time.Second)/time.Second))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", secs)); err != nil {
		return Snapshot{}, fmt.Errorf("set lock_wait_timeout: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		return Snapshot{}, fmt.Errorf("FLUSH TABLES WITH READ LOCK (waited up to %s): %w", time.Duration(secs)*time.Second, err)
	}
	// From here every commit waits: keep it to the two statements.
	_, err := conn.ExecContext(ctx, startSnapshot)
	var v string
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&v)
	}
	if _, uerr := conn.ExecContext(ctx, "UNLOCK TABLES"); uerr != nil && err == nil {
		err = fmt.Errorf("UNLOCK TABLES: %w", uerr)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot under the read lock: %w", err)
	}
	set, err := gtid.Parse(gtid.MySQL, compactSet(v))
	if err != nil {
		return Snapshot{}, fmt.Errorf("gtid_executed %q: %w", v, err)
	}
	return Snapshot{Position: set, Method: "flush_tables_with_read_lock"}, nil
}

// compactSet removes the newlines MySQL puts between the UUIDs of a GTID set.
func compactSet(s string) string {
	return strings.Join(strings.Fields(s), "")
}
