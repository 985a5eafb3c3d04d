package rocketmq

import (
	"strings"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
)

// RouteClientLog sends rocketmq-client-go's own log (rlog) to l, at level min and above,
// with library=rocketmq-client (l's own fields kept); below min it is discarded. Field values
// are encoded as outboxd's own (durations as Go strings, see internal/logging). The client logs every route
// refresh at info level to stdout by default, and its Fatal exits the process: the adapter
// logs Fatal as an error instead. Fields whose name mentions a secret or signature are
// redacted (the client never logs the SecretKey itself, only requests carrying the AccessKey
// and a signature).
//
// The client's logger is process-wide and not synchronised: call RouteClientLog once at
// startup, before any Sink is created. It does not block.
func RouteClientLog(l zerolog.Logger, min zerolog.Level) {
	rlog.SetLogger(&clientLog{log: l.With().Str("library", "rocketmq-client").Logger().Level(min)})
}

// clientLog adapts zerolog to rlog.Logger.
type clientLog struct{ log zerolog.Logger }

func (c *clientLog) emit(e *zerolog.Event, msg string, fields map[string]any) {
	if e == nil { // level disabled
		return
	}
	for k, v := range fields {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "secret") || strings.Contains(lk, "signature") || strings.Contains(lk, "password") {
			e = e.Str(k, "[redacted]")
			continue
		}
		e = logging.Field(e, k, v)
	}
	e.Msg(msg)
}

func (c *clientLog) Debug(msg string, f map[string]any)   { c.emit(c.log.Debug(), msg, f) }
func (c *clientLog) Info(msg string, f map[string]any)    { c.emit(c.log.Info(), msg, f) }
func (c *clientLog) Warning(msg string, f map[string]any) { c.emit(c.log.Warn(), msg, f) }
func (c *clientLog) Error(msg string, f map[string]any)   { c.emit(c.log.Error(), msg, f) }
func (c *clientLog) Fatal(msg string, f map[string]any)   { c.emit(c.log.Error(), msg, f) }

// Level is the client's way to change its level; the level given to RouteClientLog wins.
func (c *clientLog) Level(string) {}

// OutputPath is the client's way to log to a file; output goes where l writes.
func (c *clientLog) OutputPath(string) error { return nil }
