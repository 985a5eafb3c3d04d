package preflight

import (
	"github.com/outboxd/outboxd/backfill"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
)

// CheckBackfill is the Item.Check of check's line about what outboxd backfill needs beyond
// run's grants.
const CheckBackfill = "backfill"

// backfillItem names the privileges outboxd backfill needs on MySQL beyond run's grants (run
// needs none of them, so their absence is no problem of check's); MariaDB needs none, and gets
// no line.
func backfillItem(cfg *config.Config) (Item, bool) {
	if cfg.Source.Flavor != gtid.MySQL {
		return Item{}, false
	}
	msg := "outboxd backfill (only) needs " + backfill.MySQLLogStatusPrivilege + " on MySQL 8.4+ for a snapshot without a lock, or " +
		backfill.MySQLLockPrivilege + ", and " + backfill.MySQLXARecoverPrivilege + "; run needs none of them"
	return Item{Check: CheckBackfill, Subject: "backfill", Message: msg, line: "backfill: " + msg}, true
}
