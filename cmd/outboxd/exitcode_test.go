package main

import (
	"strings"
	"testing"
)

// --dead-letter-event without a dead_letter block is a config error: exit 2 before anything
// is connected, from run as from backfill.
func TestDeadLetterEventWithoutBlockExits2(t *testing.T) {
	cfg := writeConfig(t, t.TempDir())
	for _, args := range [][]string{
		{"run", "--config", cfg, "--dead-letter-event", "e1"},
		{"backfill", "--config", cfg, "--table", "shop.outbox_event", "--dead-letter-event", "e1"},
	} {
		err, _, _ := run(args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), "dead_letter block") {
			t.Errorf("%v: exit %d (%v), want 2 naming the dead_letter block", args, exitCode(err), err)
		}
	}
}

// status and health choose the admin address alike: --addr, else admin.listen of the config
// (--config or $OUTBOXD_CONFIG), else 127.0.0.1:9120, outboxd's default admin.listen.
func TestStatusAndHealthShareTheAdminDefault(t *testing.T) {
	t.Setenv(configEnv, "")
	cfg := writeConfig(t, t.TempDir()) // admin.listen 127.0.0.1:1: nothing listens
	for _, cmd := range []string{"status", "health"} {
		err, _, _ := run(cmd)
		if exitCode(err) == 2 || (err != nil && !strings.Contains(err.Error(), "127.0.0.1:9120")) {
			t.Errorf("%s without --addr or a config: exit %d (%v), want it to ask 127.0.0.1:9120", cmd, exitCode(err), err)
		}
		err, _, _ = run(cmd, "--config", cfg)
		if exitCode(err) != 1 || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%s --config: exit %d (%v), want 1 naming the config's admin.listen 127.0.0.1:1", cmd, exitCode(err), err)
		}
		err, _, _ = run(cmd, "--addr", "127.0.0.1:1", "--config", cfg)
		if exitCode(err) != 2 {
			t.Errorf("%s --addr --config: exit %d (%v), want 2", cmd, exitCode(err), err)
		}
	}
}
