package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/server"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/internal/sqlident"
)

// Stable names of the cleanup checks (run on the writer when cleanup is on); see servercheck.
const (
	CheckCleanupGrants = servercheck.CleanupGrants
	CheckCleanupTable  = servercheck.CleanupTable
	CheckCleanupHold   = servercheck.CleanupHold
)

// CleanupTable is one cleaned outbox table as InspectCleanup checks it.
type CleanupTable struct {
	Name      string // schema.table
	CreatedAt string // "" when the table has no created_at column configured
	// TimeZone is the table's cleanup.time_zone: required for a DATETIME created_at.
	TimeZone string
}

// CleanupRequest is what InspectCleanup verifies.
type CleanupRequest struct {
	Flavor gtid.Flavor
	Tables []CleanupTable
	// HoldTable is cleanup.hold_table when the configuration sets it ("" otherwise): no longer
	// used, so only warned about.
	HoldTable string
	Skip      []string
}

// inspectCleanupRequest verifies what cleanup needs on the writer: a writable primary
// (InspectCleanupWriter), DELETE on every cleaned table, its primary key and the created_at
// column's type; a cleanup.hold_table is a warning. It blocks on a few queries; an error means
// the server could not be inspected.
func inspectCleanupRequest(ctx context.Context, db *sql.DB, req CleanupRequest) ([]Problem, error) {
	user, gs, err := account(ctx, db, req.Flavor)
	if err != nil {
		return nil, err
	}
	var ps []Problem
	if wp, _, err := InspectCleanupWriter(ctx, db, req.Flavor); err != nil {
		return nil, err
	} else if wp != nil {
		ps = append(ps, *wp)
	}
	for _, t := range req.Tables {
		schema, name, _ := strings.Cut(t.Name, ".")
		if !gs.can("DELETE", schema, name) {
			ps = append(ps, Problem{
				Setting: "DELETE ON " + t.Name, Check: CheckCleanupGrants, Table: t.Name,
				Found: "not granted to " + user + " (cleanup is on: it deletes delivered rows)",
				Fix:   "GRANT DELETE ON " + sqlident.Table(schema, name) + " TO " + user + "; or turn cleanup off for the table",
			})
		}
		pk, err := server.PrimaryKey(ctx, db, schema, name)
		if err != nil {
			return nil, err
		}
		if len(pk) == 0 {
			ps = append(ps, Problem{
				Setting: "table " + t.Name, Check: CheckCleanupTable, Table: t.Name,
				Found: "without a primary key (or not visible to " + user + ")",
				Fix:   "give the table a primary key (cleanup deletes by it), or turn cleanup off for the table",
			})
		}
		if t.CreatedAt != "" {
			var typ string
			err := db.QueryRowContext(ctx, `SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
				schema, name, t.CreatedAt).Scan(&typ)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				ps = append(ps, Problem{
					Setting: "column " + t.Name + "." + t.CreatedAt, Check: CheckCleanupTable, Table: t.Name,
					Found: "missing (columns.created_at names it)",
					Fix:   "name the table's insert-time column in columns.created_at, or add it: ALTER TABLE " + sqlident.Table(schema, name) + " ADD COLUMN " + sqlident.Quote(t.CreatedAt) + " DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
				})
			case err != nil:
				return nil, fmt.Errorf("read the type of %s.%s: %w", t.Name, t.CreatedAt, err)
			case !strings.EqualFold(typ, "datetime") && !strings.EqualFold(typ, "timestamp"):
				ps = append(ps, Problem{
					Setting: "column " + t.Name + "." + t.CreatedAt, Check: CheckCleanupTable, Table: t.Name,
					Found: "of type " + typ + ", not DATETIME or TIMESTAMP",
					Fix:   "name a DATETIME or TIMESTAMP column holding the row's insert time in columns.created_at",
				})
			case strings.EqualFold(typ, "datetime") && t.TimeZone == "":
				// Wall-clock time without a zone: compared in the wrong one, rows written by
				// sessions behind it look hours older and go before the checkpoint covers them.
				var global string
				if err := db.QueryRowContext(ctx, "SELECT @@global.time_zone").Scan(&global); err != nil {
					return nil, fmt.Errorf("read the server's time_zone: %w", err)
				}
				ps = append(ps, Problem{
					Setting: "column " + t.Name + "." + t.CreatedAt, Check: CheckCleanupTable, Table: t.Name,
					Found: "a DATETIME (wall-clock time in whatever time_zone the inserting session had) without cleanup.time_zone",
					Fix: "set cleanup.time_zone to the time_zone your application's sessions write it in (the server's default is " + global +
						"; SYSTEM is the server host's zone; or an offset such as +00:00), or make the column a TIMESTAMP",
				})
			case strings.EqualFold(typ, "datetime"):
				var unknown bool
				if err := db.QueryRowContext(ctx, "SELECT CONVERT_TZ('2000-01-01 00:00:00', @@session.time_zone, ?) IS NULL", t.TimeZone).Scan(&unknown); err != nil {
					return nil, fmt.Errorf("check cleanup.time_zone %q: %w", t.TimeZone, err)
				}
				if unknown {
					ps = append(ps, Problem{
						Setting: "cleanup.time_zone " + t.TimeZone, Check: CheckCleanupTable, Table: t.Name,
						Found: "unknown to the server (the created_at sweep would delete nothing)",
						Fix:   "use an offset such as +00:00, or load the server's time zone tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb mysql)",
					})
				}
			}
		}
	}
	if req.HoldTable != "" {
		ps = append(ps, Problem{
			Setting: "cleanup.hold_table " + req.HoldTable, Check: CheckCleanupHold, Warning: true,
			Found: "set, but no longer used (the created_at sweep deletes only rows whose events it reads back from the broker; dead-lettered rows stay)",
			Fix:   "remove cleanup.hold_table from the configuration; the table may be dropped",
		})
	}
	markSkipped(ps, req.Skip)
	return ps, nil
}
