package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/server"
)

// verifiedRetention is check's verified line for the retention check when it found nothing:
// how long the server keeps binlogs. ok is false when the check flagged something, or the
// retention cannot be read (Inspect reported that already).
func verifiedRetention(ctx context.Context, db *sql.DB, cfg *config.Config, found []server.Problem) (CheckItem, bool) {
	if slices.ContainsFunc(found, func(p server.Problem) bool {
		return p.Check == server.CheckBinlogRetention || p.Check == server.CheckFlavor && !p.Skipped
	}) {
		return CheckItem{}, false
	}
	r, err := server.BinlogRetention(ctx, db)
	if err != nil {
		return CheckItem{}, false
	}
	msg := fmt.Sprintf("is %s, at least source.min_binlog_retention %s", r, cfg.Source.MinBinlogRetention)
	switch {
	case r.Forever:
		msg = "is " + r.String() + ": binlogs are never purged by age"
	case !r.Known():
		msg = "is " + r.String()
	}
	return CheckItem{Check: server.CheckBinlogRetention, Subject: "binlog retention", Message: msg}, true
}
