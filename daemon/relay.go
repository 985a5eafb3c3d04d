package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/cleanup"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/failover"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/internal/wait"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/sink/sinks"
	"github.com/outboxd/outboxd/startpos"
)

// relay is what a leader runs: everything Run wired, and the session loop over it. One relay
// lives for the whole process; each term as leader runs lead once.
type relay struct {
	cfg    *config.Config
	o      Options
	log    zerolog.Logger
	src    *failover.Sources // the candidates of source.addrs and the one streaming now
	sinks  map[string]sink.Sink
	router *router.Router
	m      *metrics.Metrics
	saver  *savedStore
	pl     atomic.Pointer[pipeline.Pipeline] // the current session's, for ops; nil as standby
	role   roleHolder
	// cleaner deletes delivered rows while leading; nil when cleanup is off.
	cleaner *cleanup.Cleaner

	// diverted are the rows every pipeline of this process dead-letters before sending.
	diverted pipeline.Diverted
	audit    func(string) error
	// streamed is set once a term got past its start-up: from then on an error is the
	// relay's, not an interrupted start.
	streamed atomic.Bool
	// replayed is set once --from-gtid was used: a later term resumes from the checkpoint.
	replayed bool
	// verified is the candidate whose checks Run's start-up preflight passed ("" when none).
	verified string
}

// lead relays as leader until ctx ends: it resolves and saves the start position, then streams
// sessions, reconnecting after a lost source connection. term is nil without ha; with it, every
// send and save first checks the term, and a ctx ended by the term's loss halts the pipeline
// at once (no drain, no final save). It returns nil when ctx ended for a shutdown.
func (r *relay) lead(ctx context.Context, term *election.Term) error {
	cfg, log := r.cfg, r.log
	ctx, stopHalt := haltOnFence(ctx)
	defer stopHalt()
	if term != nil {
		defer r.clearPipeline()
	}
	var guard func() error
	if term != nil {
		guard = term.Check
	}
	r.saver.setGuard(guard)

	fromGTID := r.o.FromGTID
	if r.replayed {
		fromGTID = ""
	}
	start, origin, err := r.resolve(ctx, fromGTID)
	if err != nil {
		return startupStopped(ctx, err, log)
	}
	if err := r.startLayouts(ctx, start, origin); err != nil {
		return startupStopped(ctx, err, log)
	}
	log.Info().Str("flavor", string(cfg.Source.Flavor)).Str("gtid_set", start.String()).
		Str("from", origin).Msg("starting")
	// A writer that is away (mysql store) is waited for: nothing streams before the start is
	// saved, and the start does not change meanwhile.
	prepare := server.ReconnectRetry(func(err error) bool { return errors.Is(err, checkpoint.ErrUnreachable) && ctx.Err() == nil })
	prepare.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("retry_in", in).Msg("start position not saved: the checkpoint writer is not reachable, retrying")
	}
	if err := prepare.Do(ctx, func() error { return r.saver.prepare(ctx, start, origin, log) }); err != nil {
		var ended *wait.Ended
		if errors.As(err, &ended) {
			return startupStopped(ctx, ended.Last, log)
		}
		return err
	}
	r.replayed = r.replayed || fromGTID != ""

	stopCleanup := r.cleaner.Start(ctx) // a leader's duty: only for this term
	defer stopCleanup()
	r.streamed.Store(true)
	backoff := server.ReconnectBackoff()
	var sameIDDrops serverIDDrops
	plSinks, txns := r.pipelineSinks()
	for {
		pl, err := pipeline.New(pipeline.Config{
			Router:                   r.router,
			Sinks:                    plSinks,
			Transactions:             txns,
			Saver:                    r.saver,
			Start:                    start,
			OnPoison:                 cfg.OnPoison,
			RetryInitial:             cfg.Retry.Initial,
			RetryMax:                 cfg.Retry.Max,
			MissingTopicWait:         cfg.Retry.MissingTopicTimeout,
			CheckpointInterval:       cfg.Checkpoint.Interval,
			MaxInflightEvents:        cfg.Pipeline.MaxInflightEvents,
			MaxInflightBytes:         cfg.Pipeline.MaxInflightBytes,
			DeadLetterEvents:         r.diverted.Events,
			DeadLetterWithoutPayload: r.diverted.Stripped,
			RouteLabels:              cfg.RouteLabels(),
			Audit:                    r.audit,
			Guard:                    guard,
			Logger:                   log.With().Str("component", "pipeline").Logger(),
			Metrics:                  r.m,
			Cleanup:                  r.cleaner.Session(),
		})
		if err != nil {
			return err
		}
		r.setPipeline(pl)
		began := time.Now()
		sessCtx, endSession := r.saver.fault.session(ctx)
		addr, db := r.src.Current()
		reader, err := r.src.Reader(ctx, addr)
		if err != nil {
			endSession()
			return err
		}
		err = runSession(sessCtx, reader, pl, start)
		if serr := endSession(); serr != nil {
			err = serr // the store ended the session (mysql store: writer away, or misconfigured)
		}
		start = pl.Acked()
		if txns != nil {
			// Acknowledged is not committed: what the last Kafka transaction did not commit
			// is invisible to read_committed consumers and is sent again.
			start = pl.Committed()
		}
		if errors.Is(err, pipeline.ErrHalt) || errors.Is(context.Cause(ctx), pipeline.ErrHalt) {
			msg := "halted: lost the leader lock; nothing more is sent or saved in this term"
			switch {
			case errors.Is(err, sink.ErrFenced) && !errors.Is(context.Cause(ctx), pipeline.ErrHalt):
				msg = "halted: the broker fenced this producer (another outboxd took the transactional id " + cfg.TransactionalID() + "); nothing more is sent or committed"
			case errors.Is(err, checkpoint.ErrSuperseded) && !errors.Is(context.Cause(ctx), pipeline.ErrHalt):
				msg = "halted: another process claimed the checkpoint row (superseded); nothing more is sent or saved"
			}
			log.Warn().Str("acked_gtid_set", start.String()).Str("gtid_set", r.saver.state().Last.GTIDSet).Msg(msg)
			return err
		}
		if err == nil || ctx.Err() != nil {
			r.saver.logStopped(log, start)
			return err
		}
		if retry, aerr := r.aborted(err, log); aerr != nil {
			r.saver.logStopped(log, start)
			return aerr
		} else if retry {
			if !backoff.Wait(ctx) {
				r.saver.logStopped(log, start)
				return nil
			}
			// Back to the committed position: the layouts in force there, as after a
			// reconnect.
			if err := r.resumeLayouts(ctx, start); err != nil {
				r.saver.logStopped(log, start)
				return err
			}
			continue // from the committed checkpoint, on the same source
		}
		if errors.Is(err, binlog.ErrGTIDNotOnServer) {
			// Purged while we were away (or streaming): name what is gone, as at start.
			if perr := startpos.CheckPurged(ctx, startpos.SQL{DB: db}, cfg.Source.Flavor, start, "the acknowledged position", cfg.Checkpoint.Where()); errors.Is(perr, startpos.ErrPurged) {
				err = fmt.Errorf("%w (the stream stopped with: %w)", perr, err)
			}
		}
		if !errors.Is(err, binlog.ErrDisconnected) {
			r.saver.logStopped(log, start)
			return err
		}
		if errors.Is(err, binlog.ErrServerIDInUse) {
			if ferr := sameIDDrops.add(cfg, err); ferr != nil {
				r.saver.logStopped(log, start)
				return ferr
			}
		}
		if time.Since(began) >= server.ReconnectReset {
			backoff.Reset()
		}
		warn := log.Warn().Err(err)
		if fix := binlog.FixOf(err); fix != "" {
			warn = warn.Str("fix", fix) // a dropped stream for a shared server_id says what to change
		}
		warn.Stringer("retry_in", backoff.Next()).Str("gtid_set", start.String()).
			Msg("source connection lost; in-flight sends drained, reconnecting from the acknowledged position")
		next, err := r.reconnect(ctx, start, &backoff)
		if err != nil || ctx.Err() != nil {
			// A server that came back with settings outboxd cannot read stops it, so does a
			// position no candidate has (on_missing_gtids: stop); a shutdown is no error.
			r.saver.logStopped(log, start)
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		start = next
		if err := r.resumeLayouts(ctx, start); err != nil {
			r.saver.logStopped(log, start)
			return err
		}
		if err := resumeSaved(ctx, r.saver, start, log); err != nil || ctx.Err() != nil {
			r.saver.logStopped(log, start)
			return err
		}
		r.m.SourceReconnect() // counted once the next session is about to start, not for a stop
	}
}

// pipelineSinks are the sinks the pipeline sends through, and its transactional mode: with
// delivery: exactly_once every route's sink is the kafka store's claimed session (one Kafka
// transaction carries the events and the checkpoint that covers them); otherwise the sinks Run
// opened, and nil.
func (r *relay) pipelineSinks() (map[string]sink.Sink, *pipeline.Transactions) {
	ks, ok := r.saver.store.(*kafkatxn.Store)
	if !r.cfg.ExactlyOnce() || !ok {
		return r.sinks, nil
	}
	out := make(map[string]sink.Sink, len(r.sinks))
	maps.Copy(out, r.sinks)
	for _, name := range sinks.KafkaTxnSinks(r.cfg) {
		out[name] = ks
	}
	return out, &pipeline.Transactions{
		MaxEvents: r.cfg.Transactions.MaxEvents,
		MaxBytes:  r.cfg.Transactions.MaxBytes,
		MaxAge:    r.cfg.Checkpoint.Interval,
	}
}

// aborted decides what follows a session that ended with its Kafka transaction aborted
// (sink.ErrTxnAborted): stream again from the committed checkpoint (retry), after adding the
// rows the broker refused for good to the rows diverted to the dead letter when on_poison is
// dead_letter. Under on_poison: stop such a row ends the run (the error says how to divert
// it). retry is false and the error nil for any other session end.
func (r *relay) aborted(err error, log zerolog.Logger) (retry bool, _ error) {
	if !errors.Is(err, sink.ErrTxnAborted) {
		return false, nil
	}
	var ta *pipeline.TxnAbortedError
	if errors.As(err, &ta) && len(ta.Rejected) > 0 {
		if r.cfg.OnPoison != config.OnPoisonDeadLetter {
			return false, err
		}
		if id := r.diverted.Escalate(ta.Rejected); id != "" {
			return false, fmt.Errorf("%w; the dead letter of event_id %s was refused too, even without its payload, so outboxd stops rather than abort again and again: "+
				"fix what the error says (dead_letter's topic and grants), then start outboxd again", err, id)
		}
		log.Warn().Strs("event_ids", ta.Rejected).Msg("rows refused by the broker for good go to the dead letter when streamed again (on_poison: dead_letter)")
	}
	log.Warn().Err(err).Msg("kafka transaction aborted: nothing of it is visible to read_committed consumers; streaming again from the committed checkpoint")
	return true, nil
}

// haltOnFence returns a ctx that ends with ctx, and whose cause, when ctx ended because the
// leader lock was lost (election.ErrFenced), also wraps pipeline.ErrHalt: the pipeline then
// stops at once instead of draining.
func haltOnFence(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, election.ErrFenced) {
			cause = fmt.Errorf("%w: %w", pipeline.ErrHalt, cause)
		}
		cancel(cause)
	})
	return hctx, func() {
		stop()
		cancel(nil)
	}
}

// resolve picks the candidate to stream from and the start position: the first candidate
// that has every transaction of the checkpoint (any candidate without one, or with
// --from-gtid), then startpos.Resolve on it. When none has them: with on_missing_gtids: continue
// the newest position the first such candidate shares with the checkpoint (logged, counted);
// with stop, startpos.Resolve's own refusal of a checkpoint ahead of the server, with what every
// candidate lacks. Unreachable candidates are waited for with the reconnect backoff.
func (r *relay) resolve(ctx context.Context, fromGTID string) (gtid.Set, string, error) {
	var cp gtid.Set
	hasCP := false
	earlier := r.saver.state() // what this process saved in an earlier term, if any
	if fromGTID == "" {
		c, err := r.loadCheckpoint(ctx)
		if err != nil {
			return gtid.Set{}, "", err
		}
		if c == nil && earlier.OK {
			// This process loaded or saved a position, and the checkpoint is gone now (a row
			// deleted while it stood by, or since its last term): source.start is only for a
			// first start that never had one.
			return gtid.Set{}, "", markLost(ctx, r.saver.store, r.cfg, earlier.Last, r.holder(),
				"the checkpoint was missing when this process took over, after it had read "+earlier.Last.GTIDSet)
		}
		if c != nil && c.Scope == nil {
			r.log.Warn().Strs("tables", r.cfg.ScopeTables()).Str("gtid_set", c.GTIDSet).
				Msg("the checkpoint records no table list (written by an older outboxd): adopted for this config's tables, which the next save records")
		}
		if c != nil && c.Flavor == r.cfg.Source.Flavor {
			if cp, err = c.Set(); err == nil {
				hasCP = true
			}
		}
	}
	backoff := server.ReconnectBackoff()
	verified := r.verified // Run's preflight checked it, for the first term only
	r.verified = ""
	for {
		ch, err := r.src.Pick(ctx, cp, hasCP, verified)
		verified = ""
		if err == nil && earlier.OK {
			r.src.LostBehind(ctx, earlier.Last, cp, ch)
		}
		switch {
		case err == nil && ch.Resume != nil:
			r.src.GaveUp(cp, ch)
			return ch.Resume.Shared, originMissingContinue, nil
		case err == nil:
			start, origin, err := startpos.Resolve(ctx, startpos.SQL{DB: ch.DB}, r.src.At(ch.Addr), r.saver.store, startpos.Options{FromGTID: fromGTID, Force: r.o.Force})
			if err == nil || !sqlerr.Transient(err) || ctx.Err() != nil {
				return start, origin, err
			}
			// The connection broke between the pick and the start-up queries (a server
			// restarting, a reset): as for a lost stream, wait and try again.
			r.log.Warn().Err(err).Stringer("retry_in", backoff.Next()).Msg("start position not resolved: the source connection failed, retrying")
			if !backoff.Wait(ctx) {
				return gtid.Set{}, "", ctx.Err()
			}
			continue
		case errors.Is(err, failover.ErrMissingGTIDs):
			// The refusal as for one server (startpos.ErrAhead, the fix), then every candidate.
			addr, db := r.src.Current()
			if _, _, rerr := startpos.Resolve(ctx, startpos.SQL{DB: db}, r.src.At(addr), r.saver.store, startpos.Options{FromGTID: fromGTID, Force: r.o.Force}); rerr != nil {
				return gtid.Set{}, "", fmt.Errorf("%w\n%w", rerr, err)
			}
			return gtid.Set{}, "", err
		case !errors.Is(err, binlog.ErrDisconnected) || ctx.Err() != nil:
			return gtid.Set{}, "", err
		}
		r.log.Warn().Err(err).Stringer("retry_in", backoff.Next()).Msg("no source candidate to start from yet, retrying")
		if !backoff.Wait(ctx) {
			return gtid.Set{}, "", ctx.Err()
		}
	}
}

// loadCheckpoint loads the checkpoint; a load that hits a broken connection to the store (the
// writer restarting, a reset) is retried with the reconnect backoff, as the start position
// queries are, not an exit.
func (r *relay) loadCheckpoint(ctx context.Context) (*checkpoint.Checkpoint, error) {
	var c *checkpoint.Checkpoint
	err := server.RetryTransient(ctx, r.log, "checkpoint not loaded: the store connection failed, retrying", func() (err error) {
		c, err = r.saver.store.Load(ctx)
		return err
	})
	return c, err
}

// originMissingContinue is the origin of a start cut back to the newest position both histories
// share (on_missing_gtids: continue, or the mysql store).
const originMissingContinue = "the newest position shared with a source that lacks delivered transactions"

// reconnect waits out the backoff and picks the candidate to stream from next, for the
// acknowledged position start; it returns the position to stream from (start, or the shared
// position under on_missing_gtids: continue, saved as the checkpoint before anything
// streams). It waits while no candidate is reachable; other errors end the run. It returns
// start and nil when ctx ends.
func (r *relay) reconnect(ctx context.Context, start gtid.Set, backoff *wait.Backoff) (gtid.Set, error) {
	for {
		if !backoff.Wait(ctx) {
			return start, nil
		}
		pingWriter(ctx, r.saver.store, r.log)
		ch, err := r.src.Pick(ctx, start, true, "")
		if err == nil {
			if ch.Resume == nil {
				return start, nil
			}
			r.src.GaveUp(start, ch)
			next := ch.Resume.Shared
			c := checkpoint.Checkpoint{Flavor: next.Flavor(), GTIDSet: next.String(), SavedAt: time.Now().UTC()}
			if err := r.saver.Save(ctx, c); err != nil {
				return start, fmt.Errorf("save the position %s (%s) before streaming from %s: %w: %w", next, originMissingContinue, ch.Addr, pipeline.ErrCheckpointSave, err)
			}
			return next, nil
		}
		if !errors.Is(err, binlog.ErrDisconnected) || ctx.Err() != nil {
			return start, err
		}
		msg := "no source candidate to stream from yet, retrying"
		if len(r.cfg.Source.Addrs) == 1 {
			msg = "source not inspectable before reconnecting, retrying"
		}
		r.log.Warn().Err(err).Stringer("retry_in", backoff.Next()).Msg(msg)
	}
}
