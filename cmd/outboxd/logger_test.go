package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/logging/logcheck"
)

// newLogger's two formats: JSON lines logcheck accepts, and console lines that start with the
// local time in milliseconds (the console writer reads the hook's time back).
func TestNewLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(config.Log{Level: "info", Format: "json"}, &buf)
	l.Info().Str("sink", "main").Stringer("retry_in", 2*time.Second).Msg("hello")
	l.Debug().Msg("below info")
	f, err := logcheck.Line(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		t.Fatalf("%s: %v", buf.String(), err)
	}
	if f["message"] != "hello" || f["retry_in"] != "2s" || f["sink"] != "main" {
		t.Fatalf("fields: %v", f)
	}

	buf.Reset()
	l = newLogger(config.Log{Level: "debug", Format: "console"}, &buf)
	l.Debug().Str("sink", "main").Msg("hello")
	out := buf.String()
	if !regexp.MustCompile(`^\d{2}:\d{2}:\d{2}\.\d{3} DBG hello sink=main\n$`).MatchString(stripANSI(out)) {
		t.Fatalf("console line %q", out)
	}
}

func stripANSI(s string) string {
	return regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(strings.TrimLeft(s, " "), "")
}

// log.format: console into a file (a pipe, a journal) writes no colour codes.
func TestConsoleLogIntoAFileHasNoColour(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("FORCE_COLOR", "")
	f, err := os.Create(filepath.Join(t.TempDir(), "outboxd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := newLogger(config.Log{Level: "info", Format: "console"}, f)
	l.Warn().Str("sink", "main").Msg("broker unreachable")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "\x1b[") || !strings.Contains(string(b), "WRN broker unreachable sink=main") {
		t.Fatalf("console line in a file: %q, want plain text", b)
	}
}
