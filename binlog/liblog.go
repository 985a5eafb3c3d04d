package binlog

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
)

// libLogger is go-mysql's logger: warnings and errors only, since it logs its whole config and
// every rotate at info level, and stream errors are returned by Run anyway; the floor also keeps
// its info dump of the BinlogSyncerConfig, password included, out of the log. Its lines keep l's
// fields (component=binlog) and add library=go-mysql.
func libLogger(l zerolog.Logger) *slog.Logger {
	l = l.With().Str("library", "go-mysql").Logger()
	if l.GetLevel() < zerolog.WarnLevel {
		l = l.Level(zerolog.WarnLevel)
	}
	return logging.Slog(l, classifyGoMySQL)
}

// classifyGoMySQL lowers go-mysql's warnings and errors that are normal events for outboxd to
// debug, so that a warning in the log means something an operator may act on:
//   - a read error of the dump connection ("io.ReadFull(header) failed", "connection was bad",
//     a closed connection, EOF, a timeout): go-mysql logs it and then returns it from
//     GetEvent (retry is disabled), where the Reader turns it into the error outboxd logs with
//     the position it reconnects from; it is also what Close of the stream looks like;
//   - "retry sync is disabled": outboxd disables it on purpose (it owns reconnects);
//   - KILL of the dump connection on Close answered "Unknown thread id" (1094): the server
//     already dropped the connection, which is what KILL was for;
//   - "could not set read deadline..." / "could not close connection" while closing.
func classifyGoMySQL(r slog.Record) slog.Level {
	if r.Level < slog.LevelWarn {
		return r.Level
	}
	msg := r.Message
	switch msg {
	case "retry sync is disabled", "could not close connection",
		"could not set read deadline, closing connection to unblock reader":
		return slog.LevelDebug
	case "kill connection":
		if strings.Contains(attrText(r, "error"), "1094") || strings.Contains(strings.ToLower(attrText(r, "error")), "unknown thread id") {
			return slog.LevelDebug
		}
		return r.Level
	}
	for _, s := range []string{"io.ReadFull(header) failed", "connection was bad", "use of closed network connection",
		"connection reset by peer", "broken pipe", "i/o timeout", "EOF"} {
		if strings.Contains(msg, s) && r.NumAttrs() == 0 {
			return slog.LevelDebug
		}
	}
	return r.Level
}

// attrText is the text of r's attribute key, or "".
func attrText(r slog.Record, key string) string {
	var s string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			s = fmt.Sprint(a.Value.Any())
			return false
		}
		return true
	})
	return s
}
