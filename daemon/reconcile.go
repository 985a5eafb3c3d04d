package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/reconcile"
)

// maxLoggedEvents bounds the event ids a reconcile log line names; the full list goes to
// reconcile.out.
const maxLoggedEvents = 20

// reconcileLoop runs reconcile every reconcile.interval while this process leads (a standby's
// run would repeat the leader's reads and double the alert). Each run checks the rows created
// from the durable mark kept with the checkpoint up to the database's NOW() - reconcile.delay
// (see reconcileRun), so a restart, a failed run or a takeover leaves no window unchecked. A
// run only reads the outbox and the brokers; a failed run is counted and logged, leaves the
// mark where it was, and the next one comes at the next interval. It returns when ctx ends.
func (o *ops) reconcileLoop(ctx context.Context) {
	rc := o.cfg.Reconcile
	log := o.log.With().Str("component", "reconcile").Logger()
	readers, err := reconcile.OpenReaders(o.cfg)
	if err != nil {
		log.Error().Err(err).Msg("periodic reconcile is off: its broker readers cannot be built")
		return
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	tick := time.NewTicker(rc.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !o.role.leading() {
			continue
		}
		addr, db := o.src.current()
		if db == nil {
			o.m.ReconcileFailedRun()
			log.Error().Str("source", addr).Msg("periodic reconcile skipped: no connection to the source; the next run is at the next interval")
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, rc.Interval)
		err := o.reconcileRun(rctx, db, readers, log)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			o.m.ReconcileFailedRun()
			log.Error().Err(err).Msg("periodic reconcile could not complete; the mark stays, the next run at the next interval checks from it")
		}
	}
}

// reconcileRun checks [mark, NOW() - delay) on db in windows of at most reconcile.window, and
// moves the mark to each window's end once that window was checked completely: a window left
// incomplete (rows committed into it while it was read), a failed read or a failed save ends
// the run with the mark where it was, and the next run starts there. The clock is the
// database's (the one created_at is written by), read on db. The report of the windows behind
// the mark is published (metrics, log line, reconcile.out) even when a later one fails, so
// what they found missing is not lost with the mark moved past them. It blocks on the
// database, the brokers and the checkpoint store.
func (o *ops) reconcileRun(ctx context.Context, db *sql.DB, readers map[string]reconcile.Reader, log zerolog.Logger) error {
	rc := o.cfg.Reconcile
	serverNow, err := reconcile.ServerNow(ctx, db)
	if err != nil {
		return err
	}
	if now := o.clock()(); now.Sub(serverNow).Abs() > rc.Delay {
		log.Warn().Str("server_now", logging.Time(serverNow)).Str("local_now", logging.Time(now)).
			Msg("this host's clock and the database's differ by more than reconcile.delay; reconcile follows the database's (synchronise the clocks: other time-based settings use this host's)")
	}
	mark, ok, err := o.saved.loadMark(ctx)
	if err != nil {
		return err
	}
	if !ok {
		mark = reconcile.FirstMark(serverNow, rc.Delay, rc.Window)
		log.Warn().Str("since", logging.Time(mark)).
			Msgf("no reconcile mark yet (first run with this checkpoint): starting at %s; rows created before it are not checked periodically: check them with outboxd reconcile --until %s",
				mark.UTC().Format(time.RFC3339Nano), mark.UTC().Format(time.RFC3339Nano))
	}
	var total reconcile.Report
	defer func() {
		if !total.Since.IsZero() {
			o.publishReconcile(total, log)
		}
	}()
	until, ok := o.reconcileHorizon(ctx, db, serverNow, log)
	if !ok {
		return nil // nothing can be checked yet; the mark stays
	}
	for _, w := range reconcile.Windows(mark, until, rc.Delay, rc.Window) {
		rep, err := reconcile.Run(ctx, db, o.cfg, reconcile.Options{Window: w, Before: rc.Slack, After: rc.Slack, Readers: readers})
		if err != nil {
			return fmt.Errorf("window %s .. %s: %w", logging.Time(w.Since), logging.Time(w.Until), err)
		}
		if !rep.Complete() {
			return fmt.Errorf("window %s .. %s: %s", logging.Time(w.Since), logging.Time(w.Until), strings.Join(rep.Problems(), "; "))
		}
		if err := o.saved.saveMark(ctx, w.Until); err != nil {
			return fmt.Errorf("window %s .. %s checked, mark not saved: %w", logging.Time(w.Since), logging.Time(w.Until), err)
		}
		// Only what is behind the mark is published: a window the next run checks again is
		// reported by that run.
		total.Merge(rep)
	}
	return nil
}

// reconcileHorizon is how far the windows may reach (before reconcile.delay): the database's
// NOW() on a primary, where every committed row is; on a replica (or a server that does not
// say whether it is one), no further than the saved checkpoint's commit time. A replica holds
// only what it has applied, and a window read before a lagging replica applied its rows would
// move the mark past them: the checkpoint's commit time, the primary's clock as the binlog
// carries it, is a point the server outboxd reads from has certainly reached. ok is false
// when there is no such point yet (no transaction checkpointed).
func (o *ops) reconcileHorizon(ctx context.Context, db *sql.DB, serverNow time.Time, log zerolog.Logger) (time.Time, bool) {
	replica, err := server.Replicates(ctx, db, o.cfg.Source.Flavor)
	if err == nil && !replica {
		return serverNow, true
	}
	st := o.saved.state()
	ck := st.last.CommitTime
	if !st.ok || ck.IsZero() {
		log.Debug().Err(err).Msg("periodic reconcile waits: the source may be a replica, and no checkpointed transaction says how far it has applied")
		return time.Time{}, false
	}
	if err != nil {
		log.Debug().Err(err).Msg("periodic reconcile cannot tell whether the source is a replica (grant SLAVE MONITOR, or REPLICATION CLIENT on MySQL); its windows stop at the checkpoint's commit time")
	}
	return minTime(serverNow, ck), true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// publishReconcile sets the metrics, writes reconcile.out and logs the run's report.
func (o *ops) publishReconcile(rep reconcile.Report, log zerolog.Logger) {
	o.m.ReconcileRun(rep.Checked, rep.Missing, rep.Duplicated)
	o.m.ReconcileNullCreatedAt(rep.NullCreatedAt)
	if out := o.cfg.Reconcile.Out; out != "" {
		if err := writeReport(out, rep); err != nil {
			log.Error().Err(err).Str("path", out).Msg("reconcile.out not written")
		}
	}
	ev := log.Info()
	if !rep.OK() {
		ev = log.Error().Strs("problems", rep.Problems())
	}
	ids := make([]string, 0, min(len(rep.MissingEvents), maxLoggedEvents))
	for _, e := range rep.MissingEvents[:min(len(rep.MissingEvents), maxLoggedEvents)] {
		ids = append(ids, e.EventID)
	}
	ev.Str("since", logging.Time(rep.Since)).Str("until", logging.Time(rep.Until)).Int("checked", rep.Checked).Int("found", rep.Found).
		Int("dead_lettered", rep.DeadLettered).Int("missing", rep.Missing).Int("duplicated", rep.Duplicated).
		Int("null_created_at", rep.NullCreatedAt).Int("unchecked", rep.Unchecked).
		Strs("missing_event_ids", ids).Msg("periodic reconcile")
}

func (o *ops) clock() func() time.Time {
	if o.now != nil {
		return o.now
	}
	return time.Now
}

// writeReport replaces path with rep as JSON (a temporary file renamed over it, so a reader
// never sees half a report).
func writeReport(path string, rep reconcile.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".reconcile-*.json")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
