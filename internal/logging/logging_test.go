package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging/logcheck"
)

// lines checks every line of buf with logcheck and returns their fields.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	out, err := logcheck.Lines(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNewWritesMillisecondTimeWithoutGlobals(t *testing.T) {
	before := zerolog.TimeFieldFormat
	var buf bytes.Buffer
	l := New(&buf, zerolog.InfoLevel).With().Str("component", "x").Logger()
	l.Info().Stringer("retry_in", 1500*time.Millisecond).Msg("one")
	l.Debug().Msg("below the level")
	dl := l.Level(zerolog.DebugLevel)
	dl.Debug().Msg("two")
	got := lines(t, &buf)
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2: %v", len(got), got)
	}
	if got[0]["retry_in"] != "1.5s" || got[0]["component"] != "x" {
		t.Fatalf("fields: %v", got[0])
	}
	ts, _ := time.Parse(time.RFC3339Nano, got[1]["time"].(string))
	if d := time.Since(ts); d < 0 || d > time.Minute {
		t.Fatalf("time %v is not now", ts)
	}
	if zerolog.TimeFieldFormat != before {
		t.Fatalf("zerolog.TimeFieldFormat changed to %q", zerolog.TimeFieldFormat)
	}
}

func TestField(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, zerolog.InfoLevel)
	e := l.Info()
	e = Field(e, "timeout", 3*time.Second)
	e = Field(e, "at", time.Date(2026, 12, 1, 9, 0, 0, 5e6, time.UTC))
	e = Field(e, "error", errors.New("boom"))
	e = Field(e, "n", 7)
	e = Field(e, "s", "text")
	e.Msg("m")
	got := lines(t, &buf)[0]
	want := map[string]string{"timeout": "3s", "at": "2026-12-01T09:00:00.005Z", "error": "boom", "n": "7", "s": "text"}
	for k, v := range want {
		if s := toString(got[k]); s != v {
			t.Errorf("%s = %q, want %q", k, s, v)
		}
	}
	Field(l.Debug(), "k", 1) // a disabled level is a nil event: no panic
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSlog(t *testing.T) {
	var buf bytes.Buffer
	root := New(&buf, zerolog.InfoLevel).With().Str("component", "binlog").Logger()
	quiet := func(r slog.Record) slog.Level {
		if r.Message == "normal" {
			return slog.LevelDebug
		}
		return r.Level
	}
	sl := Slog(root.With().Str("library", "lib").Logger(), quiet)
	sl.Info("info line", slog.Duration("period", 2*time.Second), slog.Any("wait", 5*time.Millisecond))
	sl.Debug("dropped")
	sl.Error("normal", slog.String("error", "closed by us"))
	sl.With("id", 3).WithGroup("g").With("a", 1).Warn("grouped", slog.Int("b", 2), slog.Group("h", slog.Int("c", 3)))
	if !sl.Enabled(t.Context(), slog.LevelInfo) || sl.Enabled(t.Context(), slog.LevelDebug) {
		t.Fatal("Enabled does not follow the logger's level")
	}
	got := lines(t, &buf) // no duplicate "time" (slog's record time is dropped), no duplicate keys
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2 (debug and the classified one dropped): %v", len(got), got)
	}
	if got[0]["period"] != "2s" || got[0]["wait"] != "5ms" || got[0]["level"] != "info" ||
		got[0]["component"] != "binlog" || got[0]["library"] != "lib" {
		t.Fatalf("first line: %v", got[0])
	}
	g := got[1]
	if toString(g["id"]) != "3" || toString(g["g.a"]) != "1" || toString(g["g.b"]) != "2" || toString(g["g.h.c"]) != "3" || g["level"] != "warn" {
		t.Fatalf("grouped line: %v", g)
	}
}

func TestMySQLDriver(t *testing.T) {
	var buf bytes.Buffer
	d := MySQLDriver(New(&buf, zerolog.InfoLevel))
	d.Print("connection.go:803 ", "closing bad idle connection: ", errors.New("EOF"))
	d.Print(mysql.ErrMalformPkt)
	d.Print("[warn] unexpected sequence nr: expected 1, got 3")
	got := lines(t, &buf)
	if len(got) != 3 {
		t.Fatalf("got %d lines: %v", len(got), got)
	}
	want := []struct{ level, msg string }{
		{"info", "closing bad idle connection: EOF"},
		{"warn", "malformed packet"},
		{"warn", "unexpected sequence nr: expected 1, got 3"},
	}
	if got[0]["caller"] != "connection.go:803" {
		t.Errorf("caller: %v", got[0])
	}
	for i, w := range want {
		if got[i]["level"] != w.level || got[i]["message"] != w.msg || got[i]["library"] != "mysql-driver" {
			t.Errorf("line %d: %v, want level %s message %q", i, got[i], w.level, w.msg)
		}
	}
	if strings.Contains(buf.String(), "[mysql]") {
		t.Fatal("raw driver prefix in the output")
	}
}
