package deadletter

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
)

// The override names its rows; each diversion is a synced line in audit.log beside the
// checkpoint file, or a log line with audit: true for the mysql store, which has no directory.
func TestOverrideAuditsEachDiversion(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{DeadLetter: &config.DeadLetter{Sink: "k", Topic: "dlq"}}
	cfg.Checkpoint.Path = filepath.Join(dir, "checkpoint.json")

	if set, audit, err := Override(cfg, nil, zerolog.Nop()); set != nil || audit != nil || err != nil {
		t.Fatalf("no ids: %v, %v", set, err)
	}
	set, audit, err := Override(cfg, []string{"e1", "e2"}, zerolog.Nop())
	if err != nil || !set["e1"] || !set["e2"] || len(set) != 2 {
		t.Fatalf("ids: %v, %v", set, err)
	}
	if err := audit("diverted e1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "audit.log")); err != nil || !strings.HasSuffix(string(b), " diverted e1\n") {
		t.Fatalf("audit.log = %q, %v", b, err)
	}

	cfg.Checkpoint.Store = config.CheckpointStoreMySQL
	var logs bytes.Buffer
	_, audit, err = Override(cfg, []string{"e1"}, zerolog.New(&logs))
	if err != nil || audit("diverted e1") != nil || !strings.Contains(logs.String(), `"audit":true`) {
		t.Fatalf("mysql store: %v, log %s", err, logs.String())
	}

	cfg.DeadLetter = nil
	if _, _, err := Override(cfg, []string{"e1"}, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "dead_letter block") {
		t.Fatalf("no dead_letter block: %v", err)
	}
}
