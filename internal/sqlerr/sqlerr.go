// Package sqlerr decides, in one place, what a failed SQL call means for the loop that made it:
// a connection that failed (wait and try again) or an answer (retrying gets the same answer).
package sqlerr

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/checkpoint"
)

// Server error numbers the classification branches on.
const (
	erAccessDenied     = 1045
	erServerShutdown   = 1053
	erConnectionKilled = 1927
)

// Transient reports whether err is a connection that failed (a dropped or reset connection,
// a timeout, a server shutting down, a connection killed, a checkpoint writer away) rather
// than an answer: worth a retry with backoff, not an exit. The checkpoint store's
// ErrUnreachable counts because the store reports its writer being away with it.
func Transient(err error) bool {
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		return me.Number == erServerShutdown || me.Number == erConnectionKilled
	}
	var ne net.Error
	return errors.Is(err, mysqldriver.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, checkpoint.ErrUnreachable) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne)
}

// Answered reports whether the server answered with an error (access denied, unknown
// database …): opening a connection stops on it, as a server that cannot be reached at all is
// waited for instead.
func Answered(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me)
}

// LoginRefused reports whether the server refused the login (ERROR 1045): a configuration
// error (or, on MariaDB, a missing REPLICATION SLAVE grant), never waited for.
func LoginRefused(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == erAccessDenied
}
