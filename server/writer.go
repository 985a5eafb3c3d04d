package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
)

// ReplicaConnections describes each replication connection (MariaDB) or channel (MySQL)
// configured on db, running or not: its name, source host and port and whether its threads
// run. It blocks on one query (two on MySQL before 8.0.22); an error wraps the server's
// (*mysql.MySQLError 1227 when the account may not read the replication status). Safe for
// concurrent use.
func ReplicaConnections(ctx context.Context, db *sql.DB, f gtid.Flavor) ([]string, error) {
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

// SuperReadOnly reports whether a MySQL server is super_read_only (which MariaDB lacks). It
// blocks on one query.
func SuperReadOnly(ctx context.Context, db *sql.DB) (bool, error) {
	var sro int
	if err := db.QueryRowContext(ctx, "SELECT @@global.super_read_only").Scan(&sro); err != nil {
		return false, fmt.Errorf("read @@super_read_only: %w", err)
	}
	return sro != 0, nil
}

// Replicates reports whether db has replication configured (a replica, running or stopped): its
// rows lag its primary's. It blocks on one query; an error (such as a missing SLAVE MONITOR or
// REPLICATION CLIENT) means it could not tell.
func Replicates(ctx context.Context, db *sql.DB, f gtid.Flavor) (bool, error) {
	conns, err := ReplicaConnections(ctx, db, f)
	return len(conns) > 0, err
}
