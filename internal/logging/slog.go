package logging

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// Classify lets a library's adapter lower the level of the library's records that are normal
// events for outboxd (a connection it closed itself, an error the library also returns and
// outboxd logs with context). It returns the level to log r at.
type Classify func(r slog.Record) slog.Level

// Slog returns a slog.Logger that writes to l: records below l's level are dropped, attributes
// become fields with Field's encoding (durations as strings, times in TimeFormat), groups are
// prefixed "group.key", and the record's own time is dropped (l's hook writes "time" once).
// classify may be nil. Safe for concurrent use.
func Slog(l zerolog.Logger, classify Classify) *slog.Logger {
	return slog.New(&slogHandler{log: l, classify: classify})
}

type slogHandler struct {
	log      zerolog.Logger
	classify Classify
	prefix   string
	attrs    []slog.Attr // WithAttrs, already prefixed
}

func (h *slogHandler) Enabled(_ context.Context, level slog.Level) bool {
	zl := zerologLevel(level)
	return zl >= h.log.GetLevel() && zl >= zerolog.GlobalLevel()
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	level := r.Level
	if h.classify != nil {
		level = h.classify(r)
	}
	e := h.log.WithLevel(zerologLevel(level))
	if e == nil {
		return nil
	}
	for _, a := range h.attrs {
		e = appendAttr(e, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		e = appendAttr(e, h.prefix, a)
		return true
	})
	e.Msg(r.Message)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		if h.prefix != "" {
			a = slog.Group(h.prefix, a) // keep the group the attribute was added under
		}
		h2.attrs = append(h2.attrs, a)
	}
	return &h2
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix = join(h.prefix, name)
	return &h2
}

func appendAttr(e *zerolog.Event, prefix string, a slog.Attr) *zerolog.Event {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		p := join(prefix, a.Key)
		for _, ga := range a.Value.Group() {
			e = appendAttr(e, p, ga)
		}
		return e
	}
	if a.Key == "" {
		return e
	}
	return Field(e, join(prefix, a.Key), a.Value.Any())
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l < slog.LevelInfo:
		return zerolog.DebugLevel
	case l < slog.LevelWarn:
		return zerolog.InfoLevel
	case l < slog.LevelError:
		return zerolog.WarnLevel
	default:
		return zerolog.ErrorLevel
	}
}
