package rocketmq

import (
	"strings"
	"sync"
	"sync/atomic"

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
// The client's logger variable is process-wide and not synchronised, and the client's
// goroutines read it while they run, so it is set once, to an adapter whose target is swapped
// atomically: RouteClientLog is safe for concurrent use and may be called again (by each
// sinks.Open, by tests) while clients log. It does not block.
func RouteClientLog(l zerolog.Logger, min zerolog.Level) {
	target := l.With().Str("library", "rocketmq-client").Logger().Level(min)
	routed.log.Store(&target)
	routeOnce.Do(func() { rlog.SetLogger(&routed) })
}

var (
	routeOnce sync.Once
	// routed is the adapter the client holds; its target moves with each RouteClientLog.
	routed clientLog
)

// clientLog adapts zerolog to rlog.Logger.
type clientLog struct {
	log atomic.Pointer[zerolog.Logger]
}

func (c *clientLog) emit(level zerolog.Level, msg string, fields map[string]any) {
	l := c.log.Load()
	if l == nil {
		return
	}
	e := eventAt(l, level)
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

func (c *clientLog) Debug(msg string, f map[string]any)   { c.emit(zerolog.DebugLevel, msg, f) }
func (c *clientLog) Info(msg string, f map[string]any)    { c.emit(zerolog.InfoLevel, msg, f) }
func (c *clientLog) Warning(msg string, f map[string]any) { c.emit(zerolog.WarnLevel, msg, f) }
func (c *clientLog) Error(msg string, f map[string]any)   { c.emit(zerolog.ErrorLevel, msg, f) }
func (c *clientLog) Fatal(msg string, f map[string]any)   { c.emit(zerolog.ErrorLevel, msg, f) }

// eventAt starts an event at level on l: nil when l's level drops it.
func eventAt(l *zerolog.Logger, level zerolog.Level) *zerolog.Event {
	switch level {
	case zerolog.DebugLevel:
		return l.Debug()
	case zerolog.InfoLevel:
		return l.Info()
	case zerolog.WarnLevel:
		return l.Warn()
	default:
		return l.Error()
	}
}

// Level is the client's way to change its level; the level given to RouteClientLog wins.
func (c *clientLog) Level(string) {}

// OutputPath is the client's way to log to a file; output goes where l writes.
func (c *clientLog) OutputPath(string) error { return nil }
