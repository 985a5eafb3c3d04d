package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/sink"
)

// relay is what a leader runs: everything Run wired, and the session loop over it. One relay
// lives for the whole process; each term as leader runs lead once.
type relay struct {
	cfg    *config.Config
	o      Options
	log    zerolog.Logger
	db     *sql.DB
	sinks  map[string]sink.Sink
	router *router.Router
	m      *metrics.Metrics
	saver  *savedStore
	reader *binlog.Reader
	ops    *ops
	role   roleHolder

	dlEvents map[string]bool
	audit    func(string) error
	// streamed is set once a term got past its start-up: from then on an error is the
	// relay's, not an interrupted start.
	streamed atomic.Bool
	// replayed is set once --from-gtid was used: a later term resumes from the checkpoint.
	replayed bool
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
		defer r.ops.clearPipeline()
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
	start, origin, err := ResolveStart(ctx, r.db, cfg, r.saver.store, fromGTID, r.o.Force)
	if err != nil {
		return startupStopped(ctx, err, log)
	}
	log.Info().Str("flavor", string(cfg.Source.Flavor)).Str("gtid_set", start.String()).
		Str("from", origin).Msg("starting")
	if err := r.saver.prepare(start, origin, log); err != nil {
		return err
	}
	r.replayed = r.replayed || fromGTID != ""

	r.streamed.Store(true)
	backoff := reconnectInitial
	var sameIDDrops serverIDDrops
	for {
		pl, err := pipeline.New(pipeline.Config{
			Router:             r.router,
			Sinks:              r.sinks,
			Saver:              r.saver,
			Start:              start,
			OnPoison:           cfg.OnPoison,
			RetryInitial:       cfg.Retry.Initial,
			RetryMax:           cfg.Retry.Max,
			MissingTopicWait:   cfg.Retry.MissingTopicTimeout,
			CheckpointInterval: cfg.Checkpoint.Interval,
			MaxInflightEvents:  cfg.Pipeline.MaxInflightEvents,
			MaxInflightBytes:   cfg.Pipeline.MaxInflightBytes,
			DeadLetterEvents:   r.dlEvents,
			RouteLabels:        cfg.RouteLabels(),
			Audit:              r.audit,
			Guard:              guard,
			Logger:             log.With().Str("component", "pipeline").Logger(),
			Metrics:            r.m,
		})
		if err != nil {
			return err
		}
		r.ops.setPipeline(pl)
		began := time.Now()
		sessCtx, endSession := r.saver.fault.session(ctx)
		err = runSession(sessCtx, r.reader, pl, start)
		if serr := endSession(); serr != nil {
			err = serr // the store ended the session (mysql store: writer away, or misconfigured)
		}
		start = pl.Acked()
		if errors.Is(err, pipeline.ErrHalt) || errors.Is(context.Cause(ctx), pipeline.ErrHalt) {
			msg := "halted: lost the leader lock; nothing more is sent or saved in this term"
			if errors.Is(err, checkpoint.ErrSuperseded) && !errors.Is(context.Cause(ctx), pipeline.ErrHalt) {
				msg = "halted: another process claimed the checkpoint row (superseded); nothing more is sent or saved"
			}
			log.Warn().Str("acked_gtid_set", start.String()).Str("gtid_set", r.saver.state().last.GTIDSet).Msg(msg)
			return err
		}
		if err == nil || ctx.Err() != nil {
			r.saver.logStopped(log, start)
			return err
		}
		if errors.Is(err, binlog.ErrGTIDNotOnServer) {
			// Purged while we were away (or streaming): name what is gone, as at start.
			if perr := checkPurged(ctx, r.db, cfg.Source.Flavor, start, "the acknowledged position", cfg.Checkpoint.Where()); errors.Is(perr, ErrStartPurged) {
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
		if time.Since(began) >= reconnectReset {
			backoff = reconnectInitial
		}
		log.Warn().Err(err).Stringer("retry_in", backoff).Str("gtid_set", start.String()).
			Msg("source connection lost; in-flight sends drained, reconnecting from the acknowledged position")
		if !waitBackoff(ctx, &backoff) {
			r.saver.logStopped(log, start)
			return nil
		}
		pingWriter(ctx, r.saver.store, log)
		if err := reverify(ctx, r.db, cfg, log); err != nil || ctx.Err() != nil {
			// A server that came back with settings outboxd cannot read stops it; a shutdown
			// during the re-check is no error.
			r.saver.logStopped(log, start)
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := resumeSaved(ctx, r.saver, start, log); err != nil || ctx.Err() != nil {
			r.saver.logStopped(log, start)
			return err
		}
		r.m.SourceReconnect() // counted once the next session is about to start, not for a stop
	}
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
