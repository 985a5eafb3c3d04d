// Package deadletter is the operator's --dead-letter-event override, for run and backfill alike:
// which rows go to the dead-letter topic although on_poison says stop, and the audit trail
// that records each diversion.
package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
)

// ErrNoDeadLetter is Check's error: --dead-letter-event was given but the config has no
// dead_letter block. It is a config error (exit 2), as the commands report them.
var ErrNoDeadLetter = errors.New("--dead-letter-event needs a dead_letter block ({sink, topic}) to send the row to")

// Check returns ErrNoDeadLetter when ids are given and cfg has no dead_letter block, nil
// otherwise: the part of Override that depends on the config alone, for a command to report
// with its other config errors before it connects anywhere. Pure; safe for concurrent use.
func Check(cfg *config.Config, ids []string) error {
	if len(ids) > 0 && cfg.DeadLetter == nil {
		return ErrNoDeadLetter
	}
	return nil
}

// Override checks --dead-letter-event ids against the config and returns the event set and the
// audit writer: one line per diversion, appended and synced to audit.log beside the
// checkpoint file, so the decision outlives the logs. The mysql and kafka stores have no directory of their
// own (a pod with a read-only root file system): there each diversion is a log line at error
// level with audit: true, which the platform's log collection keeps. Only a leader diverts
// rows, so only the leader writes either. Nil, nil, nil without ids; an error when the config
// has no dead_letter block. It does no I/O besides logging the override; the audit writer
// blocks on appending and syncing its line to the file and returns that I/O's error.
func Override(cfg *config.Config, ids []string, log zerolog.Logger) (map[string]bool, func(string) error, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	if err := Check(cfg, ids); err != nil {
		return nil, nil, err
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	if cfg.Checkpoint.MySQL() || cfg.Checkpoint.Kafka() {
		audit := func(line string) error {
			log.Error().Bool("audit", true).Str("override", "--dead-letter-event").Msg(line)
			return nil
		}
		log.Warn().Strs("event_ids", ids).Str("audit", "log lines with audit: true").
			Msg("--dead-letter-event: these rows go to the dead-letter topic if they turn out to be poison or their topic does not exist")
		return set, audit, nil
	}
	path := filepath.Join(filepath.Dir(cfg.Checkpoint.Path), "audit.log")
	audit := func(line string) error {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), line); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	log.Warn().Strs("event_ids", ids).Str("audit_file", path).
		Msg("--dead-letter-event: these rows go to the dead-letter topic if they turn out to be poison or their topic does not exist")
	return set, audit, nil
}
