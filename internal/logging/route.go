package logging

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// RouteLibraries makes l the logger of the libraries whose logger is process-wide and not
// given per use: go-sql-driver/mysql (RouteMySQLDriver) and the standard library's log package
// (RouteStdlib), which net/http's server writes its errors to. go-mysql and
// rocketmq-client-go get theirs where they are set up (binlog.Reader, rocketmq.RouteClientLog).
// Call it once at process start, before any connection is opened. Not safe for concurrent use
// with the libraries' logging.
func RouteLibraries(l zerolog.Logger) {
	RouteMySQLDriver(l)
	RouteStdlib(l)
}

// RouteStdlib sends the standard library's default logger to l as warnings with
// library=log, one line per message, instead of raw text in the JSON stream.
func RouteStdlib(l zerolog.Logger) {
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(stdlibWriter{l.With().Str("library", "log").Logger()})
}

type stdlibWriter struct{ log zerolog.Logger }

func (w stdlibWriter) Write(p []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
