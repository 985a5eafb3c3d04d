package rocketmq

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/logging/logcheck"
)

// The client's log lines are outboxd's JSON: library=rocketmq-client once next to the caller's
// fields, durations with units, secrets redacted, below the level dropped, Fatal as an error.
func TestRouteClientLog(t *testing.T) {
	var buf bytes.Buffer
	RouteClientLog(logging.New(&buf, zerolog.DebugLevel).With().Str("component", "sink").Logger(), zerolog.WarnLevel)
	t.Cleanup(func() { RouteClientLog(zerolog.New(os.Stderr), zerolog.ErrorLevel) }) // as TestMain
	rlog.Info("route refreshed", map[string]any{"topic": "t"})
	rlog.Warning("send timeout", map[string]any{"timeout": 3 * time.Second, "secretKey": "s3cr3t", rlog.LogKeyBroker: "127.0.0.1:10911"})
	rlog.Fatal("would exit", nil)
	got, err := logcheck.Lines(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if f["library"] != "rocketmq-client" || f["component"] != "sink" {
			t.Fatalf("fields: %v", f)
		}
	}
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2 (info dropped): %v", len(got), got)
	}
	if w := got[0]; w["level"] != "warn" || w["timeout"] != "3s" || w["secretKey"] != "[redacted]" || w[rlog.LogKeyBroker] != "127.0.0.1:10911" {
		t.Fatalf("warning: %v", w)
	}
	if got[1]["level"] != "error" || got[1]["message"] != "would exit" {
		t.Fatalf("fatal: %v", got[1])
	}
}
