package daemon

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

// ErrPreflight: the source server or the account is not set up for outboxd (what `outboxd check`
// classes as a problem). Streaming anyway would lose rows without an error (a statement-logged
// INSERT is not seen) or die on the first row, so run refuses, at start and after every
// reconnect. source.skip_checks overrides single checks.
var ErrPreflight = errors.New("the source server is not set up for outboxd")

// inspectRequest is what `check` and the run preflight verify on the source.
func inspectRequest(cfg *config.Config) server.Request {
	req := server.Request{
		Flavor:                  cfg.Source.Flavor,
		AllowMinimalRowMetadata: cfg.Source.AllowMinimalRowMetadata,
		Skip:                    cfg.Source.SkipChecks,
		MinBinlogRetention:      cfg.Source.MinBinlogRetention,
	}
	for i, t := range cfg.Tables {
		c := t.Columns
		// event_id, key, topic and payload: a row without one is poison (router.malformed);
		// event_type and headers only add headers.
		req.Tables = append(req.Tables, server.Table{
			Name:  t.Table,
			Field: fmt.Sprintf("tables[%d]", i),
			Columns: []server.RoleColumn{
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
			last.Columns = append(last.Columns, server.RoleColumn{Name: c.CreatedAt, Role: "created_at", Required: true, Type: outboxtable.Type("created_at")})
		}
		last.Columns = append(last.Columns, shapeColumns(t)...)
	}
	return req
}

// sourceReport is the source part of `check`, one line per finding, as check prints them.
type sourceReport struct {
	problems, warnings []string
	// skipped are findings of the checks in source.skip_checks.
	skipped []string
	// found is every finding as Inspect returned it, for check's structured report.
	found []server.Problem
}

// sourceLine is how check prints a finding and run logs it; the check's name is what
// source.skip_checks takes. Pure.
func sourceLine(addr string, p server.Problem) string {
	line := fmt.Sprintf("source %s: %s is %s: %s [check %s", addr, p.Setting, p.Found, p.Fix, p.Check)
	if p.Skipped {
		return line + ", skipped by source.skip_checks]"
	}
	return line + "]"
}

// inspectSource runs server.Inspect for cfg on db. err means the server could not be inspected.
func inspectSource(ctx context.Context, db *sql.DB, cfg *config.Config) (sourceReport, error) {
	ps, err := server.Inspect(ctx, db, inspectRequest(cfg))
	if err != nil {
		return sourceReport{}, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
	}
	// The checks of the optional columns and features, each reading the tables' columns.
	for _, more := range []func(context.Context, *sql.DB, *config.Config) ([]server.Problem, error){
		createdAtProblems, shapeProblems, reconcileIndexWarnings,
	} {
		mps, err := more(ctx, db, cfg)
		if err != nil {
			return sourceReport{}, fmt.Errorf("check source %s: %w", cfg.Source.Addr, err)
		}
		ps = append(ps, mps...)
	}
	ps = append(ps, cleanupKeyWarnings(cfg, ps)...)
	r := sourceReport{found: ps}
	for _, p := range ps {
		line := sourceLine(cfg.Source.Addr, p)
		switch {
		case p.Skipped:
			r.skipped = append(r.skipped, line)
		case p.Warning:
			r.warnings = append(r.warnings, line)
		default:
			r.problems = append(r.problems, line)
		}
	}
	return r, nil
}

// preflightTimeout bounds one inspection of the source.
const preflightTimeout = 30 * time.Second

// preflight refuses to stream from a source that `check` finds problems with, in one error that
// lists every fix. Warnings and the findings of skipped checks are logged. It blocks on the
// inspection queries; a failure to inspect is returned as is (not ErrPreflight).
func preflight(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	// A blackholed connection would otherwise hold the start (or the reconnect) forever.
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	r, err := inspectSource(ctx, db, cfg)
	if err != nil {
		return err
	}
	for _, w := range r.warnings {
		log.Warn().Msg(w)
	}
	for _, s := range r.skipped {
		log.Warn().Msg(s)
	}
	if len(r.problems) > 0 {
		return fmt.Errorf("%w: %d problem(s); fix them (outboxd check --config <file> prints the same), or, for a check that is wrong about this server, name it (in brackets) in source.skip_checks:\n  %s",
			ErrPreflight, len(r.problems), strings.Join(r.problems, "\n  "))
	}
	return nil
}

// startPreflight is the preflight before the first stream, after naming each skipped check.
func startPreflight(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	for _, name := range cfg.Source.SkipChecks {
		log.Warn().Str("check", name).
			Msg("source.skip_checks: this start-up check is skipped; a problem it finds is logged, and outboxd runs anyway")
	}
	return preflight(ctx, db, cfg, log)
}

// startPreflightWaiting is startPreflight that waits, with the reconnect backoff, while the
// server cannot be inspected because the connection fails (a restart or a reset right after
// the connection was opened); it returns ctx's error when ctx ends (Run turns a stop during
// start-up into nil).
func startPreflightWaiting(ctx context.Context, db *sql.DB, cfg *config.Config, log zerolog.Logger) error {
	check := startPreflight
	return server.RetryTransient(ctx, log, "source not inspectable at start, retrying", func() error {
		err := check(ctx, db, cfg, log)
		check = preflight // the skipped checks are named once
		return err
	})
}
