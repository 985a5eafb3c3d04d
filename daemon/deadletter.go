package daemon

import (
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
)

// DeadLetterOverride is run's --dead-letter-event for other commands that deliver rows (backfill):
// the event set and the audit writer (audit.log beside the checkpoint file, or log lines with
// audit: true for the mysql store). Nil, nil, nil without ids; an error when the config has no
// dead_letter block. Pure besides logging the override.
func DeadLetterOverride(cfg *config.Config, ids []string, log zerolog.Logger) (map[string]bool, func(string) error, error) {
	return deadLetterOverride(cfg, ids, log)
}
