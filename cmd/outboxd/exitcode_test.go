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
