package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/cleanup"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// cleanupRequest is what check and run verify on the writer when cleanup is on; ok is false
// when no table is cleaned.
func cleanupRequest(cfg *config.Config) (server.CleanupRequest, bool) {
	req := server.CleanupRequest{Flavor: cfg.Source.Flavor, Skip: cfg.Source.SkipChecks}
	for i, t := range cfg.Tables {
		s, ok := cfg.CleanupFor(i)
		if !ok {
			continue
		}
		req.Tables = append(req.Tables, server.CleanupTable{Name: t.Table, CreatedAt: s.CreatedAt, TimeZone: s.TimeZone})
	}
	if cfg.Cleanup != nil {
		req.HoldTable = cfg.Cleanup.HoldTable // only warned about: no longer used
	}
	return req, len(req.Tables) > 0
}

// inspectCleanup runs server.InspectCleanup for cfg on the writer db and returns the lines of
// its problems (and warnings for skipped checks), as check prints them and run refuses them.
func inspectCleanup(ctx context.Context, db *sql.DB, addr string, cfg *config.Config) (found []server.Problem, problems, skipped []string, err error) {
	req, ok := cleanupRequest(cfg)
	if !ok {
		return nil, nil, nil, nil
	}
	found, err = server.InspectCleanup(ctx, db, req)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("check cleanup on the writer %s: %w", addr, err)
	}
	for _, p := range found {
		line := cleanupLine(addr, p)
		if p.Skipped || p.Warning {
			skipped = append(skipped, line)
		} else {
			problems = append(problems, line)
		}
	}
	return found, problems, skipped, nil
}

// checkCleanup is check's part for cleanup: on the writer, that it is a writable primary,
// DELETE on each cleaned table, its primary key and created_at column. A no-op when cleanup
// is off.
func checkCleanup(ctx context.Context, cfg *config.Config, r *CheckReport) {
	req, ok := cleanupRequest(cfg)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	conn := server.WriterConn(cfg)
	subject := "cleanup writer " + conn.Addr
	db, err := server.Open(ctx, conn)
	if err == nil {
		defer db.Close()
		var found []server.Problem
		found, _, _, err = inspectCleanup(ctx, db, conn.Addr, cfg)
		if err == nil {
			for _, p := range found {
				it := CheckItem{Check: p.Check, Subject: p.Setting, Message: p.Found, Fix: p.Fix, Skipped: p.Skipped, line: cleanupLine(conn.Addr, p)}
				if p.Skipped || p.Warning {
					r.Warnings = append(r.Warnings, it)
				} else {
					r.Problems = append(r.Problems, it)
				}
			}
			flagged := func(check, table string) bool {
				return slices.ContainsFunc(found, func(p server.Problem) bool { return p.Check == check && p.Table == table })
			}
			for _, t := range req.Tables {
				for _, v := range []CheckItem{
					{Check: server.CheckCleanupGrants, Subject: "table " + t.Name, Message: "DELETE is granted (cleanup is on)"},
					{Check: server.CheckCleanupTable, Subject: "table " + t.Name, Message: "has a primary key" + map[bool]string{true: " and a DATETIME/TIMESTAMP " + t.CreatedAt, false: ""}[t.CreatedAt != ""]},
				} {
					if !flagged(v.Check, t.Name) {
						v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
						r.Verified = append(r.Verified, v)
					}
				}
			}
			if !flagged(server.CheckCleanupWriter, "") {
				v := CheckItem{Check: server.CheckCleanupWriter, Subject: "server", Message: "is a writable primary (read_only OFF, no replication configured)"}
				v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
				r.Verified = append(r.Verified, v)
			}
			return
		}
	}
	msg := fmt.Sprintf("cannot inspect: %v", err)
	r.Problems = append(r.Problems, CheckItem{
		Check: server.CheckCleanupGrants, Subject: subject, Message: msg,
		Fix:  "check checkpoint.writer_addr (default source.addr), source.user and source.password, and that the writable primary is up",
		line: fmt.Sprintf("%s: %s", subject, msg),
	})
}

// openCleaner connects to the writer and builds the Cleaner when cleanup is on (nil, nil
// otherwise), refusing, with the lines check prints, a writer check finds a problem with.
// The returned close releases the writer pool and the broker readers of the created_at sweep.
func openCleaner(ctx context.Context, cfg *config.Config, r *relay, log zerolog.Logger) (*cleanup.Cleaner, func(), error) {
	if _, ok := cleanupRequest(cfg); !ok {
		return nil, func() {}, nil
	}
	conn := server.WriterConn(cfg)
	db, err := server.OpenWithBackoff(ctx, conn, "cleanup writer", log)
	if err != nil {
		return nil, nil, fmt.Errorf("cleanup on checkpoint.writer_addr %s: %w", conn.Addr, err)
	}
	fail := func(err error) (*cleanup.Cleaner, func(), error) {
		db.Close()
		return nil, nil, err
	}
	var problems, skipped []string
	if err := server.RetryTransient(ctx, log, "cleanup writer not inspectable, retrying", func() (err error) {
		_, problems, skipped, err = inspectCleanup(ctx, db, conn.Addr, cfg)
		return err
	}); err != nil {
		return fail(err)
	}
	for _, s := range skipped {
		log.Warn().Msg(s)
	}
	if len(problems) > 0 {
		return fail(fmt.Errorf("%w: %d cleanup problem(s); fix them (outboxd check --config <file> prints the same), or turn cleanup off:\n  %s",
			ErrPreflight, len(problems), strings.Join(problems, "\n  ")))
	}
	cl, closeReaders, err := cleanup.Open(ctx, cleanup.Setup{
		Outbox: cfg, DB: db, Addr: conn.Addr, Line: cleanupLine, QueueKeys: r.o.CleanupQueueKeys, Metrics: r.m, Logger: log,
		Checkpoint: func() (time.Time, bool) {
			st := r.saver.state()
			return st.last.CommitTime, st.ok && !st.last.CommitTime.IsZero()
		},
	})
	if err != nil {
		return fail(err)
	}
	return cl, func() {
		closeReaders()
		db.Close()
	}, nil
}

// cleanupLine is how check prints a cleanup finding and run refuses it. Pure.
func cleanupLine(addr string, p server.Problem) string {
	return strings.Replace(sourceLine(addr, p), "source ", "cleanup writer ", 1)
}

// cleanupKeyWarnings are the warnings for tables cleaned with retention: 0 when the source's
// findings say binlog_row_metadata is not FULL (accepted by source.allow_minimal_row_metadata,
// or skipped): only FULL writes the primary key into the TABLE_MAP, so the binlog's rows carry
// no key and nothing of such a table is deleted by key, without any other sign. inspectSource
// adds them, so check prints and run logs the same lines. Pure.
func cleanupKeyWarnings(cfg *config.Config, found []server.Problem) []server.Problem {
	i := slices.IndexFunc(found, func(p server.Problem) bool { return p.Check == server.CheckBinlogRowMetadata })
	if i < 0 {
		return nil
	}
	metadata := found[i].Found
	var ws []server.Problem
	for j, t := range cfg.Tables {
		s, ok := cfg.CleanupFor(j)
		if !ok || s.Retention != 0 {
			continue
		}
		left := "so nothing of the table is ever deleted"
		if s.Sweeps() {
			left = "so only the created_at sweep deletes its rows (those it finds on the broker, once older than the checkpoint's commit time minus commit_margin)"
		}
		ws = append(ws, server.Problem{
			Setting: "cleanup of " + t.Table + " (retention: 0)", Check: server.CheckBinlogRowMetadata, Table: t.Table, Warning: true,
			Found: "without primary keys from the binlog (binlog_row_metadata is " + metadata + ": TABLE_MAP events carry no primary key), " + left,
			Fix:   "set binlog_row_metadata = FULL on the server (SET GLOBAL and my.cnf), which writes the key; or set a retention with columns.created_at for the sweep",
		})
	}
	return ws
}
