package preflight

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// cleanupRequest is what check and run verify on the writer when cleanup is on; ok is false
// when no table is cleaned.
func cleanupRequest(cfg *config.Config) (CleanupRequest, bool) {
	req := CleanupRequest{Flavor: cfg.Source.Flavor, Skip: cfg.Source.SkipChecks}
	for i, t := range cfg.Tables {
		s, ok := cfg.CleanupFor(i)
		if !ok {
			continue
		}
		req.Tables = append(req.Tables, CleanupTable{Name: t.Table, CreatedAt: s.CreatedAt, TimeZone: s.TimeZone})
	}
	if cfg.Cleanup != nil {
		req.HoldTable = cfg.Cleanup.HoldTable // only warned about: no longer used
	}
	return req, len(req.Tables) > 0
}

// InspectCleanup verifies what cleanup needs on the writer db at addr for cfg (a writable
// primary, DELETE on every cleaned table, its primary key and created_at column) and returns
// every finding, and the lines of its problems and of its warnings and skipped findings, as
// check prints them and run refuses or logs them. With cleanup off it returns nothing. It
// blocks on a few queries; err means the writer could not be inspected, not that a check
// failed. Safe for concurrent use.
func InspectCleanup(ctx context.Context, db *sql.DB, addr string, cfg *config.Config) (found []Problem, problems, skipped []string, err error) {
	req, ok := cleanupRequest(cfg)
	if !ok {
		return nil, nil, nil, nil
	}
	found, err = inspectCleanupRequest(ctx, db, req)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("check cleanup on the writer %s: %w", addr, err)
	}
	for _, p := range found {
		line := CleanupLine(addr, p)
		if p.Skipped || p.Warning {
			skipped = append(skipped, line)
		} else {
			problems = append(problems, line)
		}
	}
	return found, problems, skipped, nil
}

// CleanupOn reports whether cfg cleans any table, so that the writer must pass InspectCleanup.
// Pure.
func CleanupOn(cfg *config.Config) bool {
	_, ok := cleanupRequest(cfg)
	return ok
}

// checkCleanup is check's part for cleanup: on the writer, that it is a writable primary,
// DELETE on each cleaned table, its primary key and created_at column. A no-op when cleanup
// is off.
func checkCleanup(ctx context.Context, cfg *config.Config, r *Report) {
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
		var found []Problem
		found, _, _, err = InspectCleanup(ctx, db, conn.Addr, cfg)
		if err == nil {
			for _, p := range found {
				it := Item{Check: p.Check, Subject: p.Setting, Message: p.Found, Fix: p.Fix, Skipped: p.Skipped, line: CleanupLine(conn.Addr, p)}
				if p.Skipped || p.Warning {
					r.Warnings = append(r.Warnings, it)
				} else {
					r.Problems = append(r.Problems, it)
				}
			}
			flagged := func(check, table string) bool {
				return slices.ContainsFunc(found, func(p Problem) bool { return p.Check == check && p.Table == table })
			}
			for _, t := range req.Tables {
				for _, v := range []Item{
					{Check: CheckCleanupGrants, Subject: "table " + t.Name, Message: "DELETE is granted (cleanup is on)"},
					{Check: CheckCleanupTable, Subject: "table " + t.Name, Message: "has a primary key" + map[bool]string{true: " and a DATETIME/TIMESTAMP " + t.CreatedAt, false: ""}[t.CreatedAt != ""]},
				} {
					if !flagged(v.Check, t.Name) {
						v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
						r.Verified = append(r.Verified, v)
					}
				}
			}
			if !flagged(CheckCleanupWriter, "") {
				v := Item{Check: CheckCleanupWriter, Subject: "server", Message: "is a writable primary (read_only OFF, no replication configured)"}
				v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
				r.Verified = append(r.Verified, v)
			}
			return
		}
	}
	r.unreachable(CheckCleanupGrants, subject, fixWriterUnreachable)("cannot inspect", err)
}

// CleanupLine is how check prints a cleanup finding of the writer at addr, and how run refuses
// it or the writer guard reports it. Pure.
func CleanupLine(addr string, p Problem) string {
	return strings.Replace(sourceLine(addr, p), "source ", "cleanup writer ", 1)
}

// cleanupKeyWarnings are the warnings for tables cleaned with retention: 0 when the source's
// findings say binlog_row_metadata is not FULL (accepted by source.allow_minimal_row_metadata,
// or skipped): only FULL writes the primary key into the TABLE_MAP, so the binlog's rows carry
// no key and nothing of such a table is deleted by key, without any other sign. inspectSource
// adds them, so check prints and run logs the same lines. Pure.
func cleanupKeyWarnings(cfg *config.Config, found []Problem) []Problem {
	i := slices.IndexFunc(found, func(p Problem) bool { return p.Check == CheckBinlogRowMetadata })
	if i < 0 {
		return nil
	}
	metadata := found[i].Found
	var ws []Problem
	for j, t := range cfg.Tables {
		s, ok := cfg.CleanupFor(j)
		if !ok || s.Retention != 0 {
			continue
		}
		left := "so nothing of the table is ever deleted"
		if s.Sweeps() {
			left = "so only the created_at sweep deletes its rows (those it finds on the broker, once older than the checkpoint's commit time minus commit_margin)"
		}
		ws = append(ws, Problem{
			Setting: "cleanup of " + t.Table + " (retention: 0)", Check: CheckBinlogRowMetadata, Table: t.Table, Warning: true,
			Found: "without primary keys from the binlog (binlog_row_metadata is " + metadata + ": TABLE_MAP events carry no primary key), " + left,
			Fix:   "set binlog_row_metadata = FULL on the server (SET GLOBAL and my.cnf), which writes the key; or set a retention with columns.created_at for the sweep",
		})
	}
	return ws
}
