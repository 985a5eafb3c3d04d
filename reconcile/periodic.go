package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/logging"
)

// maxLoggedEvents bounds the event ids a reconcile log line names; the full list goes to
// reconcile.out.
const maxLoggedEvents = 20

// Periodic is the daemon's reconcile: a run every reconcile.interval while this process leads.
type Periodic struct {
	Config *config.Config // its Reconcile is set
	Host   Host
	// Marks keeps the mark with the checkpoint; SaveMark must refuse while this process may
	// not save the checkpoint (the leader's guard): a fenced leader must not move it past rows
	// its successor has not checked.
	Marks   checkpoint.ReconcileMark
	Metrics Metrics
	Log     zerolog.Logger
	Now     func() time.Time // the process's clock, only to warn of skew; nil is time.Now

	// skewed is set while the last run found the clocks more than reconcile.delay apart: the
	// warning is logged when a skew begins, not at every run (a clock days off would repeat
	// it every interval), and an info line says when it ended. Owned by Run's goroutine.
	skewed bool
}

// Run runs reconcile every reconcile.interval while this process leads. Each run checks the
// rows created from the durable mark kept with the checkpoint up to the database's NOW() -
// reconcile.delay (see run), so a restart, a failed run or a takeover leaves no window
// unchecked. A run only reads the outbox and the brokers; a failed run is counted and logged,
// leaves the mark where it was, and the next one comes at the next interval. It blocks until
// ctx ends; broker readers that cannot be built end it at once, logged.
func (p *Periodic) Run(ctx context.Context) {
	rc := p.Config.Reconcile
	log := p.Log.With().Str("component", "reconcile").Logger()
	readers, err := OpenReaders(p.Config)
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
		if !p.Host.Leading() {
			continue
		}
		addr, db := p.Host.Source()
		if db == nil {
			p.Metrics.ReconcileFailedRun()
			log.Error().Str("source", addr).Msg("periodic reconcile skipped: no connection to the source; the next run is at the next interval")
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, rc.Interval)
		err := p.run(rctx, dbSource{db: db, cfg: p.Config, readers: readers}, log)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.Metrics.ReconcileFailedRun()
			log.Error().Err(err).Msg("periodic reconcile could not complete; the mark stays, the next run at the next interval checks from it")
		}
	}
}

// run checks [mark, NOW() - delay) on src in windows of at most reconcile.window, and moves
// the mark to each window's end once that window was checked completely: a window left
// incomplete (rows committed into it while it was read), a failed read or a failed save ends
// the run with the mark where it was, and the next run starts there. The clock is the
// database's (the one created_at is written by), read on src. The report of the windows behind
// the mark is published (metrics, log line, reconcile.out) even when a later one fails, so
// what they found missing is not lost with the mark moved past them. It blocks on the
// database, the brokers and the checkpoint store.
func (p *Periodic) run(ctx context.Context, src source, log zerolog.Logger) error {
	rc := p.Config.Reconcile
	serverNow, err := src.Now(ctx)
	if err != nil {
		return err
	}
	now := p.clock()()
	switch skew := serverNow.Sub(now); {
	case skew.Abs() > rc.Delay && !p.skewed:
		p.skewed = true
		log.Warn().Str("server_now", logging.Time(serverNow)).Str("local_now", logging.Time(now)).Float64("skew_seconds", skew.Seconds()).
			Msg("this host's clock and the database's differ by more than reconcile.delay; reconcile follows the database's (synchronise the clocks: other time-based settings use this host's); logged once until they agree again")
	case skew.Abs() <= rc.Delay && p.skewed:
		p.skewed = false
		log.Info().Str("server_now", logging.Time(serverNow)).Str("local_now", logging.Time(now)).Float64("skew_seconds", skew.Seconds()).
			Msg("this host's clock and the database's agree again, within reconcile.delay")
	}
	mark, ok, err := p.Marks.LoadMark(ctx)
	if err != nil {
		return err
	}
	if !ok {
		mark = FirstMark(serverNow, rc.Delay, rc.Window)
		log.Warn().Str("since", logging.Time(mark)).
			Msgf("no reconcile mark yet (first run with this checkpoint): starting at %s; rows created before it are not checked periodically: check them with outboxd reconcile --until %s",
				mark.UTC().Format(time.RFC3339Nano), mark.UTC().Format(time.RFC3339Nano))
	}
	var total Report
	defer func() {
		if !total.Since.IsZero() {
			p.publish(total, log)
		}
	}()
	until, ok := p.horizon(ctx, src, serverNow, log)
	if !ok {
		return nil // nothing can be checked yet; the mark stays
	}
	for _, w := range Windows(mark, until, rc.Delay, rc.Window) {
		rep, err := src.Check(ctx, w)
		if err != nil {
			return fmt.Errorf("window %s .. %s: %w", logging.Time(w.Since), logging.Time(w.Until), err)
		}
		if !rep.Complete() {
			return fmt.Errorf("window %s .. %s: %s", logging.Time(w.Since), logging.Time(w.Until), strings.Join(rep.Problems(), "; "))
		}
		if err := p.Marks.SaveMark(ctx, w.Until); err != nil {
			return fmt.Errorf("window %s .. %s checked, mark not saved: %w", logging.Time(w.Since), logging.Time(w.Until), err)
		}
		// Only what is behind the mark is published: a window the next run checks again is
		// reported by that run.
		total.Merge(rep)
	}
	return nil
}

// horizon is how far the windows may reach (before reconcile.delay): the database's NOW() on
// a primary, where every committed row is; on a replica (or a server that does not say whether
// it is one), no further than the saved checkpoint's commit time. A replica holds only what it
// has applied, and a window read before a lagging replica applied its rows would move the mark
// past them: the checkpoint's commit time, the primary's clock as the binlog carries it, is a
// point the server outboxd reads from has certainly reached. ok is false when there is no such
// point yet (no transaction checkpointed).
func (p *Periodic) horizon(ctx context.Context, src source, serverNow time.Time, log zerolog.Logger) (time.Time, bool) {
	replica, err := src.Replicates(ctx)
	if err == nil && !replica {
		return serverNow, true
	}
	ck, ok := p.Host.Checkpointed()
	if !ok || ck.IsZero() {
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

// publish sets the metrics, writes reconcile.out and logs the run's report.
func (p *Periodic) publish(rep Report, log zerolog.Logger) {
	p.Metrics.ReconcileRun(rep.Checked, rep.Missing, rep.Duplicated)
	p.Metrics.ReconcileNullCreatedAt(rep.NullCreatedAt)
	if out := p.Config.Reconcile.Out; out != "" {
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

func (p *Periodic) clock() func() time.Time {
	if p.Now != nil {
		return p.Now
	}
	return time.Now
}

// writeReport replaces path with rep as JSON (a temporary file renamed over it, so a reader
// never sees half a report).
func writeReport(path string, rep Report) error {
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
