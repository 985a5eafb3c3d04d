package cleanup

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/reconcile"
)

const (
	// fullPassRounds: every this many sweep rounds (and at each term's first) the sweep looks
	// at every row older than its bound again, from the table's oldest; the rounds between
	// look only at rows newer than the previous round's bound. A row it kept is so looked at
	// again at most once per full pass, which bounds what rows that stay (never relayed,
	// dead-lettered) cost in broker reads, and a row whose created_at lies behind the bound
	// when it commits (a client clock behind the server's) is found by the next full pass.
	fullPassRounds = 10
	// sweepSliceRows bounds the rows, and their keys, a sweep holds at once.
	sweepSliceRows = 10_000
	// oldestMargin is how far before the oldest created_at a full pass begins: a DATETIME's
	// conversion to an instant is ambiguous by up to an hour around a DST change.
	oldestMargin = 24 * time.Hour
	// listedUnproven is how many event ids a warning about unproven rows names.
	listedUnproven = 5
)

// sweepState is one table's sweep progress, owned by its loop.
type sweepState struct {
	rounds   int       // rounds since the last full pass began; 0: the next is one
	next     time.Time // the previous round's upper bound
	unproven int       // rows kept without proof since the last full pass began
}

// sweep is one round of the created_at sweep: a reconcile (reconcile.Prove) of the rows whose
// created_at is older than both the server's NOW minus the retention and the saved
// checkpoint's commit time minus commit_margin. Those bounds only choose which rows are looked
// at (rows of transactions the checkpoint does not cover would only be reported); what is
// deleted is what Prove finds at its route's topic. It returns the first error; the rows
// proven before it are deleted, the round is repeated whole.
func (c *Cleaner) sweep(ctx context.Context, t *table, lim *limiter, log zerolog.Logger) error {
	ckpt, ok := c.cfg.Checkpoint()
	if !ok || ckpt.IsZero() {
		log.Debug().Msg("cleanup sweep: no saved checkpoint with a commit time yet")
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	var now float64
	if err := c.cfg.DB.QueryRowContext(qctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&now); err != nil {
		return fmt.Errorf("read the server's clock: %w", err)
	}
	until := ckpt.Add(-t.Settings.CommitMargin)
	if byRetention := time.UnixMicro(int64(now * 1e6)).Add(-t.Settings.Retention); byRetention.Before(until) {
		until = byRetention
	}
	full := t.sw.rounds == 0
	if !full && until.Before(t.sw.next) {
		// The bound went back: the database's clock stepped back, and NOW() and the commit
		// times with it. Rows written since carry a created_at behind the previous bound,
		// where the rounds between full passes never look, and the rounds would find nothing
		// new until the clock caught up again (a step back of a day: a day without a sweep).
		// A full pass now takes them; the rounds after it go on from the new bound.
		log.Warn().Str("bound", logging.Time(until)).Str("previous_bound", logging.Time(t.sw.next)).
			Msg("cleanup sweep: its bound went back (the database's clock stepped back); a full pass looks at the rows written since")
		full = true
	}
	since := t.sw.next
	if full {
		var oldest sql.NullFloat64
		if err := c.cfg.DB.QueryRowContext(qctx, t.stmts.minCreated).Scan(&oldest); err != nil {
			return fmt.Errorf("read the oldest created_at: %w", err)
		}
		if !oldest.Valid { // an empty table
			c.cfg.Metrics.SetCleanupUnproven(t.label, 0)
			t.sw = sweepState{rounds: 1, next: until}
			return nil
		}
		since = time.UnixMicro(int64(oldest.Float64 * 1e6)).Add(-oldestMargin)
	}
	if !since.Before(until) {
		return nil // the checkpoint has not moved: nothing new to look at
	}
	proven := 0
	rep, err := reconcile.Prove(ctx, c.cfg.DB, c.cfg.Outbox, reconcile.ProveOptions{
		Table: t.Index, PK: t.PK, Zone: t.zone(), Window: reconcile.Window{Since: since, Until: until},
		Before: reconcile.DefaultSlack, After: reconcile.DefaultSlack, Readers: c.cfg.Readers,
		SliceRows: sweepSliceRows, MaxListed: listedUnproven,
		Proven: func(ctx context.Context, rows []reconcile.ProvenRow) error {
			proven += len(rows)
			return c.deleteProven(ctx, t, lim, rows)
		},
	})
	if err != nil {
		return fmt.Errorf("created_at sweep of [%s, %s): %w", logging.Time(since), logging.Time(until), err)
	}
	kept := rep.Checked - proven
	if full {
		t.sw.unproven = 0
	}
	t.sw.unproven += kept
	t.sw.next = until
	t.sw.rounds = (t.sw.rounds + 1) % fullPassRounds
	c.cfg.Metrics.SetCleanupUnproven(t.label, t.sw.unproven)
	log.Debug().Bool("full_pass", full).Int("checked", rep.Checked).Int("proven", proven).Int("kept", kept).Msg("cleanup sweep")
	if kept > 0 {
		ids := make([]string, 0, len(rep.MissingEvents))
		for _, e := range rep.MissingEvents {
			ids = append(ids, e.EventID)
		}
		log.Warn().Int("rows", kept).Int("not_found", rep.Missing).Int("dead_lettered", rep.DeadLettered).
			Str("since", logging.Time(since)).Str("until", logging.Time(until)).Str("event_ids", strings.Join(ids, " ")).
			Msg("cleanup sweep: rows kept without proof of delivery (their event is not at the topic their route gives: never relayed, such as rows written with sql_log_bin=0, dead-lettered, or gone from the broker because cleanup.retention outlasts the broker's); " +
				"check them with outboxd reconcile over that window, resend what is missing by inserting a new outbox row with the same event_id (consumers dedupe by it), and delete what you have handled by hand")
	}
	return nil
}

// zone is the time_zone a DATETIME created_at is written in ("" for a TIMESTAMP).
func (t *table) zone() string {
	if t.CreatedAtDatetime {
		return t.Settings.TimeZone
	}
	return ""
}

// deleteProven deletes rows, batch by batch at the table's rate.
func (c *Cleaner) deleteProven(ctx context.Context, t *table, lim *limiter, rows []reconcile.ProvenRow) error {
	for len(rows) > 0 && ctx.Err() == nil {
		n := min(len(rows), t.Settings.Batch)
		batch := rows[:n]
		rows = rows[n:]
		if !lim.wait(ctx, n) {
			return nil
		}
		keys := make([][]any, n)
		ids := make([]string, n)
		for i, r := range batch {
			keys[i], ids[i] = r.PK, string(r.EventID)
		}
		// The rule: a row is deleted only on proof its event was acknowledged. These rows'
		// event ids were read back from the topics their routes give, as often as the rows
		// that carry them (reconcile.Prove); the event id is matched again as bytes, so a row
		// that took a proven row's key since is not deleted in its place.
		q, args := t.stmts.deleteRows(keys, ids)
		dctx, cancel := context.WithTimeout(ctx, statementTimeout)
		res, err := c.cfg.DB.ExecContext(dctx, q, args...)
		cancel()
		if err != nil {
			return fmt.Errorf("delete %d row(s) found on the broker: %w", n, err)
		}
		d, _ := res.RowsAffected()
		c.cfg.Metrics.CleanupDeleted(t.label, int(d))
	}
	return nil
}
