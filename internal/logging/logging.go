// Package logging builds outboxd's zerolog loggers and routes the logs of the libraries it uses
// (go-mysql's slog, go-sql-driver/mysql's Logger, rocketmq-client-go's rlog) through them, so
// the JSON stream has one shape: one object per line, each key once, `time` in RFC 3339 with
// milliseconds, and every duration a Go duration string ("1.5s", "250ms").
//
// It sets no zerolog package global (TimeFieldFormat, DurationFieldUnit...): the timestamp is
// written by a hook of the logger New returns, and durations are logged as strings
// (Event.Stringer(key, d), or Field), never with Event.Dur, whose integer depends on a global
// unit. TestNoUnitlessLogFields enforces that in the source.
package logging

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// TimeFormat is the layout of every time in the log: RFC 3339 with milliseconds, fixed width
// so lines sort as text.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// New returns a JSON logger writing to w at level and above, each line with the local time
// under "time" (TimeFormat). Loggers derived from it (With, Level) keep the timestamp. It sets
// no global. Safe for concurrent use if w is.
func New(w io.Writer, level zerolog.Level) zerolog.Logger {
	return zerolog.New(w).Level(level).Hook(timestamp{})
}

// timestamp adds "time" when the event is written: the same place zerolog's own
// Context.Timestamp hook puts it, but in TimeFormat instead of the global TimeFieldFormat.
type timestamp struct{}

func (timestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(TimeFormat))
}

// Time formats t for a log field, as the timestamp is: e.Str("failing_since", logging.Time(t)).
// A zero t is "" (never set).
func Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(TimeFormat)
}

// Field adds v under key the way outboxd logs its own fields: a duration as its Go string,
// a time in TimeFormat, an error as its text, anything else as zerolog's Interface (JSON). For
// adapters of other libraries' fields, whose types are not known in advance. e may be nil (a
// disabled level).
func Field(e *zerolog.Event, key string, v any) *zerolog.Event {
	switch x := v.(type) {
	case time.Duration:
		return e.Stringer(key, x)
	case time.Time:
		return e.Str(key, Time(x))
	case error:
		return e.AnErr(key, x)
	case string:
		return e.Str(key, x)
	case []byte:
		return e.Bytes(key, x)
	default:
		return e.Interface(key, v)
	}
}
