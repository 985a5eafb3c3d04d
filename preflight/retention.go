package preflight

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/servercheck"
	"github.com/outboxd/outboxd/server"
)

// CheckBinlogRetention is the check that the server keeps its binlogs at least
// source.min_binlog_retention; see servercheck.BinlogRetention.
const CheckBinlogRetention = servercheck.BinlogRetention

// RetentionProblem returns the warning when r is shorter than min, nil when r is long enough,
// forever, unknown, or min is 0. Pure.
func RetentionProblem(f gtid.Flavor, r server.Retention, min time.Duration) *Problem {
	if min <= 0 || !r.Known() || r.Forever || r.Period >= min {
		return nil
	}
	secs := int64(math.Ceil(min.Seconds()))
	var fix string
	switch {
	case r.RDS:
		fix = fmt.Sprintf("CALL mysql.rds_set_configuration('binlog retention hours', %d);", int64(math.Ceil(min.Hours())))
	case f == gtid.MySQL:
		fix = fmt.Sprintf("SET PERSIST binlog_expire_logs_seconds = %d;", secs)
	default:
		fix = fmt.Sprintf("SET GLOBAL binlog_expire_logs_seconds = %d; and add binlog_expire_logs_seconds = %d under [mysqld] in my.cnf so it survives a restart", secs, secs)
	}
	return &Problem{
		Setting: "binlog retention", Check: CheckBinlogRetention, Warning: true,
		Found: r.String() + ", shorter than source.min_binlog_retention " + min.String() +
			": when outboxd is stopped or stuck longer, the server purges binlogs it has not read and it cannot resume",
		Fix: fix + " (or, if that retention is intended, lower source.min_binlog_retention)",
	}
}

// verifiedRetention is check's verified line for the retention check when it found nothing:
// how long the server keeps binlogs. ok is false when the check flagged something, or the
// retention cannot be read (Inspect reported that already).
func verifiedRetention(ctx context.Context, db *sql.DB, cfg *config.Config, found []Problem) (Item, bool) {
	if slices.ContainsFunc(found, func(p Problem) bool {
		return p.Check == CheckBinlogRetention || p.Check == CheckFlavor && !p.Skipped
	}) {
		return Item{}, false
	}
	r, err := server.BinlogRetention(ctx, db)
	if err != nil {
		return Item{}, false
	}
	msg := fmt.Sprintf("is %s, at least source.min_binlog_retention %s", r, cfg.Source.MinBinlogRetention)
	switch {
	case r.Forever:
		msg = "is " + r.String() + ": binlogs are never purged by age"
	case !r.Known():
		msg = "is " + r.String()
	}
	return Item{Check: CheckBinlogRetention, Subject: "binlog retention", Message: msg}, true
}
