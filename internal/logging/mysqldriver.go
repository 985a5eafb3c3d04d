package logging

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"
)

// MySQLDriver adapts l to go-sql-driver/mysql's Logger, whose default prints raw
// "[mysql] 2006/01/02 15:04:05 packets.go:58 ..." lines to stderr. Lines carry
// library=mysql-driver and the driver's source position as caller. The driver logs only broken connections, which it also returns to the
// caller (database/sql retries on a fresh connection, outboxd logs what is left with context),
// so they are info; a malformed packet or an out-of-order sequence number, which would be a
// server or driver bug, is a warning.
func MySQLDriver(l zerolog.Logger) mysql.Logger {
	return driverLog{l.With().Str("library", "mysql-driver").Logger()}
}

// RouteMySQLDriver makes MySQLDriver(l) the driver's process-wide logger. Configs made before
// the call keep the old logger: call it once at startup, before any connection is opened. Not
// safe for concurrent use with opening connections.
func RouteMySQLDriver(l zerolog.Logger) {
	_ = mysql.SetLogger(MySQLDriver(l)) // errors only on a nil logger
}

var callerRE = regexp.MustCompile(`^(\S+\.go:\d+) (.*)$`)

type driverLog struct{ log zerolog.Logger }

func (d driverLog) Print(v ...any) {
	msg := strings.TrimSpace(fmt.Sprint(v...))
	level := zerolog.InfoLevel
	for _, x := range v {
		if err, ok := x.(error); ok && errors.Is(err, mysql.ErrMalformPkt) {
			level = zerolog.WarnLevel
		}
	}
	if rest, ok := strings.CutPrefix(msg, "[warn]"); ok {
		level, msg = zerolog.WarnLevel, strings.TrimSpace(rest)
	}
	e := d.log.WithLevel(level)
	if m := callerRE.FindStringSubmatch(msg); m != nil { // the driver prefixes "packets.go:58 "
		e, msg = e.Str("caller", m[1]), m[2]
	}
	e.Msg(msg)
}
