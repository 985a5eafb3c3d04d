package cleanup

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/internal/logging"
)

// The created_at sweep keeps dead-lettered rows by the hold table, which only knows the dead
// letters of runs that recorded them (a swept table under cleanup). A row dead-lettered by a
// run without cleanup, or by a relay before outboxd, is not held, so the sweep must not reach
// back before recording began. Each swept table has one marker row in the hold table
// (event_id ''): row_id holds since (unix seconds: dead letters of every transaction that
// committed from then on are held), held_at holds through (the commit time of the newest
// checkpoint about to be saved by a recording run, written before that save: every dead letter
// it covers was held first). At each session's start (every term, and every reconnect: the
// writer may now be a new primary that lacks the newest hold rows), with C0 the commit time of
// the checkpoint saved then: through >= C0 means no checkpoint progress went unrecorded, and since stays;
// otherwise (cleanup was off for a while, or a run crashed between writing through and saving)
// recording starts over at since = C0. The sweep takes only rows with created_at >= since +
// commit_margin (margin: whole-second commit times, and transactions open across since).
// Rows older than that stay until an operator deletes them.

// markerEventID is the marker row's event_id.
const markerEventID = ""

func (c *Cleaner) beginTable(ctx context.Context, t *table, ckpt time.Time) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	db, hold := c.cfg.DB, t.stmts.hold
	c0 := float64(ckpt.UnixMicro()) / 1e6
	if ckpt.IsZero() {
		if err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&c0); err != nil {
			return 0, err
		}
	}
	var sinceText string
	var through float64
	err := db.QueryRowContext(ctx, "SELECT row_id, UNIX_TIMESTAMP(held_at) FROM "+hold+" WHERE tbl = ? AND event_id = ?", t.label, markerEventID).Scan(&sinceText, &through)
	since, perr := strconv.ParseFloat(sinceText, 64)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = db.ExecContext(ctx, "INSERT INTO "+hold+" (tbl, event_id, row_id, gtid, held_at) VALUES (?, ?, ?, '', FROM_UNIXTIME(?))",
			t.label, markerEventID, strconv.FormatFloat(c0, 'f', 6, 64), c0)
		c.cfg.Logger.Info().Str("table", t.label).Str("since", logging.Time(unixTime(c0))).
			Msg("cleanup: dead letters recorded from now on; the created_at sweep leaves older rows alone")
		return c0, err
	case err != nil:
		return 0, err
	case perr == nil && through >= c0:
		return since, nil
	}
	_, err = db.ExecContext(ctx, "UPDATE "+hold+" SET row_id = ?, held_at = FROM_UNIXTIME(?) WHERE tbl = ? AND event_id = ?",
		strconv.FormatFloat(c0, 'f', 6, 64), c0, t.label, markerEventID)
	c.cfg.Logger.Warn().Str("table", t.label).Str("recorded_through", logging.Time(unixTime(through))).Str("checkpoint_commit_time", logging.Time(unixTime(c0))).
		Msg("cleanup: the checkpoint moved on while dead letters were not recorded (cleanup off, or a stop before the record caught up); the created_at sweep leaves rows inserted before the checkpoint alone: delete them by hand once their dead letters are handled")
	return c0, err
}

// ensureBegun reads the table's marker (beginTable) when the session changed since it last
// did, from the commit time of the checkpoint saved now: once per term and after every
// reconnect, by the table's loop before a sweep and by certify before the session's first
// save (so that save is certified and the record does not start over needlessly). Until it
// succeeds since stays unknown: the sweep does not run and saves are not certified. Safe for
// concurrent use; with wait false it gives up at once when another call is reading.
func (c *Cleaner) ensureBegun(ctx context.Context, t *table, wait bool) {
	if wait {
		t.beginning.Lock()
	} else if !t.beginning.TryLock() {
		return
	}
	defer t.beginning.Unlock()
	c.beginMu.Lock()
	g, done := c.gen.Load(), t.begun == c.gen.Load()
	c.beginMu.Unlock()
	if done || g == 0 {
		return // read for this session, or no session yet
	}
	ckpt, _ := c.cfg.Checkpoint()
	since, err := c.beginTable(ctx, t, ckpt)
	if err != nil {
		c.cfg.Metrics.CleanupFailed(t.label)
		c.cfg.Logger.Warn().Err(err).Str("table", t.label).Msg("cleanup: the hold table's marker not read or written; the created_at sweep waits for the next round")
		return
	}
	c.beginMu.Lock()
	defer c.beginMu.Unlock()
	if c.gen.Load() == g { // a session that started meanwhile is read for later
		t.since.Store(&since)
		t.begun = g
	}
}

// certify records, before a checkpoint save, that every dead letter up to its commit time is
// held. A failure only makes the next term start recording over (rows stay longer).
func (c *Cleaner) certify(commit time.Time) {
	if commit.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	at := float64(commit.UnixMicro()) / 1e6
	for _, t := range c.tables {
		if t.Settings.Sweeps() && t.since.Load() == nil {
			c.ensureBegun(ctx, t, false) // a new session: read the marker before certifying
		}
		if t.since.Load() == nil {
			continue // not swept, or the marker is unknown in this session
		}
		if _, err := c.cfg.DB.ExecContext(ctx, "UPDATE "+t.stmts.hold+" SET held_at = FROM_UNIXTIME(?) WHERE tbl = ? AND event_id = ? AND held_at < FROM_UNIXTIME(?)",
			at, t.label, markerEventID, at); err != nil {
			c.cfg.Metrics.CleanupFailed(t.label)
			c.cfg.Logger.Debug().Err(err).Str("table", t.label).Msg("cleanup: hold marker not advanced")
		}
	}
}

func unixTime(s float64) time.Time { return time.UnixMicro(int64(s * 1e6)).UTC() }
