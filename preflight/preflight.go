// Package preflight judges whether a server, the account and the sinks are set up for outboxd:
// the rules, the Problems they find and the words that say what to change. `outboxd check`
// prints Check's Report; run refuses a source (Gate, StartWaiting) or a cleanup writer
// (InspectCleanup) with the same lines, so the two never disagree. The facts it judges are
// read by package server.
package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/outboxtable"
	"github.com/outboxd/outboxd/server"
)

// ErrNotSetUp: the source server or the account is not set up for outboxd (what `outboxd check`
// classes as a problem). Streaming anyway would lose rows without an error (a statement-logged
// INSERT is not seen) or die on the first row, so run refuses, at start and after every
// reconnect. source.skip_checks overrides single checks.
var ErrNotSetUp = errors.New("the source server is not set up for outboxd")

// inspectRequest is what `check` and the run preflight verify on the source.
func inspectRequest(cfg *config.Config) Request {
	req := Request{
		Flavor:                  cfg.Source.Flavor,
		AllowMinimalRowMetadata: cfg.Source.AllowMinimalRowMetadata,
		Skip:                    cfg.Source.SkipChecks,
		MinBinlogRetention:      cfg.Source.MinBinlogRetention,
	}
	for i, t := range cfg.Tables {
		c := t.Columns
		// event_id, key, topic and payload: a row without one is poison (router.malformed);
		// event_type and headers only add headers.
		req.Tables = append(req.Tables, Table{
			Name:  t.Table,
			Field: t.Field(i),
			Columns: []RoleColumn{
				{Name: c.EventID, Role: "event_id", Required: true, Type: outboxtable.Type("event_id")},
				{Name: c.Key, Role: "key", Required: true, Type: outboxtable.Type("key")},
				{Name: c.Topic, Role: "topic", Required: true, Type: outboxtable.Type("topic")},
				{Name: c.Payload, Role: "payload", Required: true, Type: outboxtable.Type("payload")},
				{Name: c.EventType, Role: "event_type", Type: outboxtable.Type("event_type")},
				{Name: c.Headers, Role: "headers", Type: outboxtable.Type("headers")},
			},
		})
		last := &req.Tables[len(req.Tables)-1]
		if c.CreatedAt != "" {
			last.Columns = append(last.Columns, RoleColumn{Name: c.CreatedAt, Role: "created_at", Required: true, Type: outboxtable.Type("created_at")})
		}
		last.Columns = append(last.Columns, shapeColumns(t)...)
	}
	return req
}

// sourceReport is the source part of `check`, one line per finding, as check prints them.
type sourceReport struct {
	// problems are the lines of the findings that keep outboxd from running.
	problems []string
	// found is every finding as Inspect returned it, for check's structured report.
	found []Problem
	// cfg is the config inspected: tables[].pattern entries replaced by the tables they match.
	cfg *config.Config
}

// sourceLine is how check prints a finding and run logs it; the check's name is what
// source.skip_checks takes. Pure.
func sourceLine(addr string, p Problem) string {
	line := fmt.Sprintf("source %s: %s is %s: %s [check %s", addr, p.Setting, p.Found, p.Fix, p.Check)
	if p.Skipped {
		return line + ", skipped by source.skip_checks]"
	}
	return line + "]"
}

// inspectSource runs Inspect for cfg on db. err means the server could not be inspected.
func inspectSource(ctx context.Context, db *sql.DB, cfg *config.Config) (sourceReport, error) {
	expanded, patternWarnings, err := expandPatterns(ctx, db, cfg)
	if err != nil {
		return sourceReport{}, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
	}
	cfg = expanded
	ps, err := Inspect(ctx, db, inspectRequest(cfg))
	if err != nil {
		return sourceReport{}, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
	}
	ps = append(ps, patternWarnings...)
	// The checks of the optional columns and features, each reading the tables' columns.
	for _, more := range []func(context.Context, *sql.DB, *config.Config) ([]Problem, error){
		createdAtProblems, shapeProblems, reconcileIndexWarnings,
	} {
		mps, err := more(ctx, db, cfg)
		if err != nil {
			return sourceReport{}, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
		}
		ps = append(ps, mps...)
	}
	ps = append(ps, cleanupKeyWarnings(cfg, ps)...)
	r := sourceReport{found: ps, cfg: cfg}
	for _, p := range ps {
		if !p.Skipped && !p.Warning {
			r.problems = append(r.problems, sourceLine(cfg.Source.Addr, p))
		}
	}
	return r, nil
}

// preflightTimeout bounds one inspection of the source.
const preflightTimeout = 30 * time.Second

// Gate refuses to stream from the source db (cfg.Source.Addr) that Check finds problems with,
// in one error wrapping ErrNotSetUp that lists every fix. Warnings and the findings of skipped
// checks are logged. It blocks on the inspection queries, at most 30 s; a failure to inspect is
// returned as is (not ErrNotSetUp). Safe for concurrent use.
func Gate(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	return gate(ctx, db, cfg, log, func(Problem) bool { return true })
}

// gate is Gate logging only the warnings and skipped findings that logged accepts.
func gate(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger, logged func(Problem) bool) error {
	// A blackholed connection would otherwise hold the start (or the reconnect) forever.
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	r, err := inspectSource(ctx, db, cfg)
	if err != nil {
		return err
	}
	// Warnings first, then the findings of skipped checks, as check prints them.
	for _, skipped := range []bool{false, true} {
		for _, p := range r.found {
			if p.Skipped == skipped && (p.Warning || p.Skipped) && logged(p) {
				log.Warn().Msg(sourceLine(cfg.Source.Addr, p))
			}
		}
	}
	if len(r.problems) > 0 {
		return fmt.Errorf("%w: %d problem(s); fix them (outboxd check --config <file> prints the same), or, for a check that is wrong about this server, name it (in brackets) in source.skip_checks:\n  %s",
			ErrNotSetUp, len(r.problems), strings.Join(r.problems, "\n  "))
	}
	return nil
}

// startGate is the Gate before the first stream, after naming each skipped check.
func startGate(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	for _, name := range cfg.Source.SkipChecks {
		log.Warn().Str("check", name).
			Msg("source.skip_checks: this start-up check is skipped; a problem it finds is logged, and outboxd runs anyway")
	}
	return Gate(ctx, db, cfg, log)
}

// StartWaiting is Gate before the first stream: it names each check source.skip_checks skips,
// once, then waits, with the reconnect backoff, while the server cannot be inspected because
// the connection fails (a restart or a reset right after the connection was opened). It
// returns nil when the source passed, an error wrapping ErrNotSetUp when it has problems, and
// ctx's error when ctx ends (daemon.Run turns a stop during start-up into nil).
func StartWaiting(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	check := startGate
	return server.RetryTransient(ctx, log, "source not inspectable at start, retrying", func() error {
		err := check(ctx, db, cfg, log)
		check = Gate // the skipped checks are named once
		return err
	})
}
