package backfill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/binlog"
)

// ER_PARSE_ERROR, a server's answer to a statement it does not know, and ER_UNKNOWN_ERROR,
// Dolt's.
const (
	erParseError = 1064
	erUnknown    = 1105
)

// Prepared XA transactions and the snapshot.
//
// An XA transaction prepared before the snapshot and committed after it breaks the snapshot's
// promise: its XA PREPARE, which carries the rows, is in the binlog before the snapshot's
// position, so run starts after it, while its rows are not in the snapshot (not committed yet).
// Run then sees only the XA COMMIT group, without the rows, and they are never sent. A GTID
// position cannot leave out the prepare (a MariaDB position holds one sequence number per
// domain, and the relay pins its own checkpoint below a prepare for the same reason, see
// pipeline/xa.go), so the backfill refuses while XA RECOVER lists any: the operator commits or
// rolls them back (or pauses the XA writers) and runs it again.
//
// XA RECOVER is asked before and after the snapshot is taken. A transaction at risk is prepared
// at the snapshot, so one of the two lists it unless it was prepared after the first and
// committed before the second, both within the few statements that take the snapshot.

// preparedXA lists the server's prepared XA transactions (XA RECOVER), as xids an operator can
// type in XA COMMIT. It blocks on one query; conn must not be used concurrently.
func preparedXA(ctx context.Context, conn *sql.Conn) ([]string, error) {
	rows, err := conn.QueryContext(ctx, "XA RECOVER")
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == erParseError || me.Number == erUnknown && strings.Contains(me.Message, "syntax error")) {
		return nil, nil // a server without XA (Dolt answers 1105 "syntax error") has no prepared XA transaction
	}
	if err != nil {
		return nil, fmt.Errorf("XA RECOVER (to find prepared XA transactions, whose rows no snapshot holds; MySQL needs %s): %w", MySQLXARecoverPrivilege, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var formatID, glen, blen int64
		var data []byte
		if err := rows.Scan(&formatID, &glen, &blen, &data); err != nil {
			return nil, fmt.Errorf("XA RECOVER: %w", err)
		}
		if glen < 0 || blen < 0 || glen+blen > int64(len(data)) {
			out = append(out, fmt.Sprintf("%q", data))
			continue
		}
		out = append(out, binlog.XID{FormatID: formatID, Gtrid: string(data[:glen]), Bqual: string(data[glen : glen+blen])}.String())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("XA RECOVER: %w", err)
	}
	return out, nil
}

// errPreparedXA is the refusal for prepared XA transactions at the snapshot.
func errPreparedXA(xids []string) error {
	return fmt.Errorf("%d prepared XA transaction(s) at the snapshot (%s): their XA PREPARE is before the snapshot's GTID position "+
		"but their rows are not in the snapshot (not committed), so neither the backfill nor run would send them; "+
		"XA COMMIT or XA ROLLBACK them (XA RECOVER lists them), or pause the XA writers, and run the backfill again",
		len(xids), strings.Join(xids, ", "))
}

// union is a followed by the entries of b not in a.
func union(a, b []string) []string {
	out := append([]string{}, a...)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
