package binlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/logging/logcheck"
)

// go-mysql's lines keep the Reader's component and add library=go-mysql (not a second
// "component"); the warnings and errors it logs for what outboxd does on purpose, or returns to
// the Reader anyway, are debug; the rest keep their level, and info stays below the floor.
func TestGoMySQLLogger(t *testing.T) {
	var buf bytes.Buffer
	root := logging.New(&buf, zerolog.DebugLevel).With().Str("component", "binlog").Logger()
	l := libLogger(root)
	l.Info("create BinlogSyncer", slog.Any("config", "..."))                                                                     // dropped: below warn
	l.Error("io.ReadFull(header) failed. err EOF: connection was bad")                                                           // our close / a lost stream
	l.Warn("retry sync is disabled")                                                                                             // we disabled it
	l.Error("kill connection", slog.Any("error", errors.New("ERROR 1094 (HY000): Unknown thread id: 42")), slog.Int64("id", 42)) // already gone
	l.Error("kill connection", slog.Any("error", errors.New("ERROR 1095 (HY000): You are not owner of thread 42")), slog.Int64("id", 42))
	l.Error("invalid stream header", slog.Int("header", 7))
	got, err := logcheck.Lines(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if f["component"] != "binlog" || f["library"] != "go-mysql" {
			t.Fatalf("fields: %v", f)
		}
	}
	// The debug lines are gone too: the floor is warn whatever the Reader's level.
	if len(got) != 2 {
		t.Fatalf("got %d lines, want the two real errors: %v", len(got), got)
	}
	if got[0]["message"] != "kill connection" || !strings.Contains(got[0]["error"].(string), "1095") || got[0]["level"] != "error" {
		t.Fatalf("first: %v", got[0])
	}
	if got[1]["message"] != "invalid stream header" || got[1]["level"] != "error" {
		t.Fatalf("second: %v", got[1])
	}
}

func TestClassifyGoMySQL(t *testing.T) {
	rec := func(level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
		r := slog.NewRecord(time.Time{}, level, msg, 0)
		r.AddAttrs(attrs...)
		return r
	}
	for _, c := range []struct {
		r    slog.Record
		want slog.Level
	}{
		{rec(slog.LevelError, "io.ReadFull(header) failed. err read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection: connection was bad"), slog.LevelDebug},
		{rec(slog.LevelError, "read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout"), slog.LevelDebug},
		{rec(slog.LevelWarn, "retry sync is disabled"), slog.LevelDebug},
		{rec(slog.LevelError, "kill connection", slog.Any("error", errors.New("ERROR 1094 (HY000): Unknown thread id: 9"))), slog.LevelDebug},
		{rec(slog.LevelError, "kill connection", slog.Any("error", errors.New("ERROR 1045 (28000): Access denied"))), slog.LevelError},
		{rec(slog.LevelError, "retry sync err, wait 1s and retry again", slog.Any("error", errors.New("EOF"))), slog.LevelError},
		{rec(slog.LevelInfo, "syncer is closing..."), slog.LevelInfo},
	} {
		if got := classifyGoMySQL(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.r.Message, got, c.want)
		}
	}
}
