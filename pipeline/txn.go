package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/wait"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/sink"
)

// Exactly-once mode (Config.Transactions).
//
// The sinks and the Saver are then one transactional producer (sink/kafkatxn): everything sent
// since the last Save is in one open broker transaction, and Save writes the checkpoint record
// into it and commits. A read_committed consumer sees the events when, and only when, the
// checkpoint that covers them is committed with them. So the rule here is stricter than
// at-least-once's "never past an unacknowledged event": the checkpoint of a commit covers
// EXACTLY the source transactions whose events are in the broker transaction. Less, and a
// restart resends events already visible; more, and it skips source transactions never sent.
// Hence the commit happens on the dispatcher goroutine, which alone knows what was handed, at a
// source-transaction boundary, once the tracker has nothing unacknowledged: its acknowledged
// set is then exactly what was handed.
//
// A send that fails is never resent: the broker transaction that holds, or lost, its earlier
// attempt is doomed. The run stops sending, aborts it and returns a *TxnAbortedError; the next
// start resends everything after the committed checkpoint.

// Defaults for the zero values of Transactions.
const (
	DefaultTxnMaxEvents = 100_000
	DefaultTxnMaxBytes  = 64 << 20
	DefaultTxnMaxAge    = time.Second
)

// Transactions sizes the broker transactions of exactly-once mode. A commit is due at the first
// source-transaction boundary where the events or bytes sent since the last commit reach
// MaxEvents or MaxBytes, or where the first source transaction taken since then is MaxAge old
// (which also commits progress of source transactions without outbox rows). The limits are
// checked only at boundaries: a source transaction larger than them stays in one broker
// transaction.
type Transactions struct {
	MaxEvents, MaxBytes int
	MaxAge              time.Duration
}

// Committer is the Saver of exactly-once mode.
type Committer interface {
	// Save writes c into the open broker transaction and commits it; see Saver. An error
	// wrapping sink.ErrTxnAborted says the broker aborted it, one wrapping sink.ErrFenced that
	// a newer producer took over; any other error leaves the outcome unknown and Save may be
	// called again.
	Saver
	// Abort aborts the open broker transaction: nothing sent since the last Save becomes
	// visible. It blocks until the broker answered or ctx ends; a no-op when none is open.
	Abort(ctx context.Context) error
}

// TxnAbortedError ends a run in exactly-once mode whose broker transaction was aborted: a send
// failed, or the broker aborted the commit. Nothing sent since the last committed checkpoint
// (Pipeline.Committed) is visible to read_committed consumers; the next start resends it.
type TxnAbortedError struct {
	Err error
	// Rejected are the event ids the broker refused for good (sink.IsPermanent): sent again,
	// they would abort the transaction again.
	Rejected []string
}

func (e *TxnAbortedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "broker %v: %v; nothing sent since the last committed checkpoint is visible to read_committed consumers, and the next start sends it again from there", sink.ErrTxnAborted, e.Err)
	if len(e.Rejected) > 0 {
		fmt.Fprintf(&b, "; the broker refused event_id %s for good: fix what the error says, or run once with --dead-letter-event %s to divert it before it is sent",
			strings.Join(e.Rejected, ", "), e.Rejected[0])
	}
	return b.String()
}

// Unwrap exposes sink.ErrTxnAborted and the cause to errors.Is and errors.As.
func (e *TxnAbortedError) Unwrap() []error { return []error{sink.ErrTxnAborted, e.Err} }

// Diverted are the rows a relay diverts to the dead letter before sending them, across the
// pipelines of one process: the operator's (outboxd run --dead-letter-event) and, in
// exactly-once mode, the rows a broker refused for good in an aborted transaction. Their maps
// are Config.DeadLetterEvents and Config.DeadLetterWithoutPayload. Not safe for concurrent
// use: it changes only between pipelines.
type Diverted struct {
	Events   map[string]bool
	Stripped map[string]bool // rows of Events whose dead letter goes without the payload
}

// Escalate records what each row the broker refused for good (rejected, from a
// TxnAbortedError) gets when streamed again: a row refused once goes to the dead letter; a row
// whose dead letter was refused in turn (with the payload: too large, say) goes without the
// payload, as at least once; the row stays in the outbox table either way. It returns the
// first row refused even without its payload ("" when none): streaming it again would abort
// again, so the caller stops.
func (d *Diverted) Escalate(rejected []string) (exhausted string) {
	if d.Events == nil {
		d.Events = map[string]bool{}
	}
	if d.Stripped == nil {
		d.Stripped = map[string]bool{}
	}
	for _, id := range rejected {
		switch {
		case !d.Events[id]:
			d.Events[id] = true
		case !d.Stripped[id]:
			d.Stripped[id] = true
		default:
			return id
		}
	}
	return ""
}

// txnState is the exactly-once bookkeeping.
type txnState struct {
	c   Committer
	lim Transactions

	// Owned by the dispatcher goroutine (and read by Run once dispatch returned).
	events, bytes int       // sent since the last commit
	since         time.Time // when the first transaction since the last commit was taken; zero: none
	boundary      bool      // no source transaction is partly handed
	fails         saveFailures
	timer         *time.Timer // for MaxAge while the input is idle (txnReceive)
	backoff       wait.Backoff
	// held is a receive the idle rule took while it waited for the drain (idleCommit), which
	// txnReceive returns next; holding says one is held (heldOK false: in was closed).
	held    *binlog.Txn
	heldOK  bool
	holding bool
	// stopped is the commit error that ended dispatch: saves failing for SaveFailureLimit, a
	// fence, an abort, a GTID the set could not take. Run then aborts instead of committing.
	stopped error

	mu        sync.Mutex
	committed gtid.Set
	failure   *TxnAbortedError // the first send failure or aborted commit
}

func newTxnState(cfg Config) (*txnState, error) {
	c, ok := cfg.Saver.(Committer)
	if !ok {
		return nil, errors.New("pipeline: Transactions set but the Saver cannot commit or abort a broker transaction (no Committer)")
	}
	lim := *cfg.Transactions
	setDefault(&lim.MaxEvents, DefaultTxnMaxEvents)
	setDefault(&lim.MaxBytes, DefaultTxnMaxBytes)
	setDefault(&lim.MaxAge, DefaultTxnMaxAge)
	return &txnState{c: c, lim: lim, boundary: true, committed: cfg.Start.Clone(),
		backoff: wait.Backoff{Initial: cfg.RetryInitial, Max: maxSaveRetry}}, nil
}

// Committed returns a copy of the executed set of the last successful Save in exactly-once
// mode (Config.Start before any): what a read_committed consumer has seen. In at-least-once
// mode it is Config.Start. Safe for concurrent use.
func (p *Pipeline) Committed() gtid.Set {
	if p.txn == nil {
		return p.cfg.Start.Clone()
	}
	p.txn.mu.Lock()
	defer p.txn.mu.Unlock()
	return p.txn.committed.Clone()
}

func (x *txnState) fail(f *TxnAbortedError) *TxnAbortedError {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.failure == nil {
		x.failure = f
	} else {
		x.failure.Rejected = append(x.failure.Rejected, f.Rejected...)
	}
	return x.failure
}

func (x *txnState) failed() *TxnAbortedError {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.failure
}

// txnReceive is dispatch's receive in exactly-once mode: while the input is idle with
// uncommitted source transactions at a boundary, it commits them when MaxAge has passed (the
// idle rule of txnHanded commits only events). ok is false when ctx ended or in closed.
func (p *Pipeline) txnReceive(ctx context.Context, in <-chan *binlog.Txn) (t *binlog.Txn, ok bool, err error) {
	x := p.txn
	if x.holding {
		t, ok := x.held, x.heldOK
		x.held, x.heldOK, x.holding = nil, false, false
		return t, ok, nil
	}
	for {
		if x.since.IsZero() || !x.boundary {
			select {
			case <-ctx.Done():
				return nil, false, nil
			case t, ok := <-in:
				return t, ok, nil
			}
		}
		select {
		case t, ok := <-in:
			return t, ok, nil // what is waiting costs no timer
		default:
		}
		if x.timer == nil {
			x.timer = time.NewTimer(0)
			<-x.timer.C
		}
		x.timer.Reset(x.since.Add(x.lim.MaxAge).Sub(p.cfg.Now()))
		select {
		case <-ctx.Done():
			x.timer.Stop()
			return nil, false, nil
		case t, ok := <-in:
			x.timer.Stop()
			return t, ok, nil
		case <-x.timer.C:
		}
		if err := p.commit(ctx); err != nil || ctx.Err() != nil {
			return nil, false, err
		}
	}
}

// txnHanded counts a piece of n events and size bytes just taken in and commits when a commit
// is due: at a boundary (the piece ended its source transaction, and no XA transaction is
// prepared or partly read: their rows are held, not handed, so the acknowledged set could not
// reach what was sent), when the input has nothing waiting and events are uncommitted, or a
// limit is reached. Its error ends dispatch.
func (p *Pipeline) txnHanded(ctx context.Context, in <-chan *binlog.Txn, n, size int, boundary bool) error {
	x := p.txn
	if x.since.IsZero() {
		x.since = p.cfg.Now()
	}
	x.events += n
	x.bytes += size
	x.boundary = boundary && p.xa.open == nil && len(p.xa.prepared) == 0
	if !x.boundary {
		return nil
	}
	if x.events >= x.lim.MaxEvents || x.bytes >= x.lim.MaxBytes || p.cfg.Now().Sub(x.since) >= x.lim.MaxAge {
		return p.commit(ctx)
	}
	if x.events > 0 && len(in) == 0 {
		return p.idleCommit(ctx, in)
	}
	return nil
}

// idleCommit is the idle rule: commit what was sent, unless a transaction arrives before it is
// all acknowledged. Then it was a pause of the reader, not the end of a burst: a catch-up whose
// reader is slower than the sends would otherwise commit, a drain and a broker round trip,
// after nearly every source transaction. The arrival is held for txnReceive, so nothing is
// skipped or reordered.
//
// It waits on the input and the drain at once. Waiting on the drain alone, and looking at the
// input only when an acknowledgement woke it, stalled the dispatcher for about one produce
// round trip at every pause of the reader: in a 1-row exactly-once catch-up the dispatcher
// stood in that wait for two thirds of the run (15,000 waits in 4.5 s, bench/README.md).
func (p *Pipeline) idleCommit(ctx context.Context, in <-chan *binlog.Txn) error {
	x := p.txn
	wctx, cancel := context.WithCancel(ctx)
	drained := make(chan error, 1)
	go func() { drained <- p.tracker.waitDrained(wctx) }()
	select {
	case t, ok := <-in:
		cancel()
		<-drained
		x.held, x.heldOK, x.holding = t, ok, true
		if !ok {
			return p.commit(ctx) // the input ended: idle for good
		}
		return nil
	case err := <-drained:
		cancel()
		if err != nil {
			return nil // stopping: what was handed and not acknowledged is aborted by Run
		}
		// Drained, at a boundary, and only this goroutine hands events: commit's own wait
		// returns at once.
		return p.commit(ctx)
	}
}

// commit waits until every event handed is acknowledged, then saves the checkpoint, which
// commits the broker transaction, retrying transient failures with backoff while dispatch
// waits. It returns nil when ctx ends first (Run then commits or aborts), and the error that
// ends dispatch: a
// fence (after halting), an aborted transaction (recorded for Run), or saves failing for
// SaveFailureLimit.
func (p *Pipeline) commit(ctx context.Context) error {
	x := p.txn
	if err := p.tracker.waitDrained(ctx); err != nil {
		return nil // stopping: what was handed and not acknowledged is aborted by Run
	}
	for {
		if p.halted.Load() {
			return nil
		}
		err := p.commitOnce(ctx)
		if err == nil {
			x.backoff.Reset()
			if x.fails.n > 0 {
				p.saveRecovered(&x.fails)
			}
			return nil
		}
		if !transientSave(err) {
			// A fence (the run halted), an abort (recorded) or a GTID the set could not take.
			x.stopped = err
			return err
		}
		if ctx.Err() != nil {
			return nil // stopping: Run tries once more
		}
		if err := p.saveFailed(&x.fails, err, x.backoff.Next()); err != nil {
			x.stopped = err
			return err
		}
		if !x.backoff.Wait(ctx) {
			return nil
		}
	}
}

// commitOnce saves the checkpoint of everything acknowledged, which must be everything handed
// (the caller checked the tracker is drained at a boundary). On success the uncommitted counts
// start over. A fence halts the run and an abort is recorded; both are returned as they are.
// Any other failure is a *saveError: the outcome is unknown, and a retry may commit.
func (p *Pipeline) commitOnce(ctx context.Context) error {
	x := p.txn
	c, set, txns, err := p.tracker.committable()
	if err != nil {
		return err
	}
	// Every event handed was acknowledged and no source transaction is partly handed: the
	// acknowledged set is exactly what the broker transaction holds, so committing it with
	// this checkpoint neither resends what it shows nor skips what it lacks.
	if err := p.writeCheckpoint(ctx, &c); err != nil {
		switch {
		case errors.Is(err, sink.ErrFenced):
			return p.fence(err)
		case errors.Is(err, sink.ErrTxnAborted):
			return x.fail(&TxnAbortedError{Err: err})
		}
		return err
	}
	p.saved(c, txns)
	x.mu.Lock()
	x.committed = set
	x.mu.Unlock()
	x.events, x.bytes, x.since = 0, 0, time.Time{}
	return nil
}

// transientSave reports whether err, from commitOnce, leaves the commit's outcome unknown, so
// that another Save may commit: not a fence, not an abort.
func transientSave(err error) bool {
	var se *saveError
	return errors.As(err, &se) && !errors.Is(err, ErrHalt) && !errors.Is(err, sink.ErrTxnAborted)
}

// fence halts the run on err, a refusal by the broker because a newer producer took the
// transactional id: no more sends, no final save. It returns the cause Run returns.
func (p *Pipeline) fence(err error) error {
	herr := fmt.Errorf("%w: %w", ErrHalt, err)
	if p.halt != nil {
		p.halt(herr)
	} else {
		p.halted.Store(true)
	}
	return herr
}

// txnSendFailed is a lane's answer to a failed Send in exactly-once mode: never resend (the
// broker transaction is doomed), halt on a fence, otherwise record the failure with the
// events the broker refused for good. It returns the error that ends the lane.
func (p *Pipeline) txnSendFailed(ctx context.Context, name string, items []item, err error, se *sink.SendError) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sink %s: %d message(s) still unacknowledged at shutdown: %w", name, len(se.Failures), ctx.Err())
	}
	if errors.Is(err, sink.ErrFenced) {
		return p.fence(fmt.Errorf("sink %s: %w", name, err))
	}
	var rejected []string
	for _, f := range se.Failures {
		if errors.Is(f.Err, sink.ErrFenced) {
			return p.fence(fmt.Errorf("sink %s: %w", name, f.Err))
		}
		kind := metrics.KindTransient
		switch {
		case sink.IsPermanent(f.Err):
			kind = metrics.KindPermanent
			rejected = append(rejected, string(items[f.Index].ev.EventID.Bytes))
		case sink.IsTopicMissing(f.Err):
			kind = metrics.KindTopicMissing
		}
		p.m.Failed(name, items[f.Index].route, kind, 1)
	}
	return p.txn.fail(&TxnAbortedError{Err: fmt.Errorf("sink %s: send of %d message(s) failed, from %s: %w",
		name, len(se.Failures), describe(items[se.Failures[0].Index]), err), Rejected: rejected})
}

// errListed is why a row listed in DeadLetterEvents is diverted when routed in exactly-once
// mode.
var errListed = errors.New("listed in --dead-letter-event: diverted before sending, as under delivery: exactly_once a refused send aborts the whole broker transaction")

// preDivert routes ev, which an operator listed in DeadLetterEvents, to its dead letter at
// route time: in exactly-once mode a rejection cannot be diverted after the send. route is its
// route's metrics label. Audited as every --dead-letter-event diversion.
func (p *Pipeline) preDivert(t *binlog.Txn, ev *binlog.Event, route string) (string, *sink.Message, error) {
	name, msg, err := p.poison(t, ev, errListed, metrics.ReasonRejected, true)
	if err != nil {
		return "", nil, err
	}
	if p.cfg.DeadLetterWithoutPayload[string(ev.EventID.Bytes)] {
		if stripped, ok := withoutPayload(msg); ok {
			msg = stripped
		}
	}
	p.m.TableDeadLettered(p.tableLabel(ev), route)
	return name, msg, nil
}

// endTxn ends a run in exactly-once mode once dispatch returned and the lanes stopped, unless it
// halted: a recorded failure aborts and is returned; otherwise (a shutdown, the input closed, a
// poison row under stop) what was handed is committed if all of it was acknowledged at a
// boundary, else aborted. drainTimedOut says the lanes were stopped by the drain timeout.
func (p *Pipeline) endTxn(ctx context.Context, dispatchErr, laneErr error, drainTimedOut bool) error {
	x := p.txn
	if f := x.failed(); f != nil {
		return p.abort(ctx, f)
	}
	if x.stopped != nil {
		return p.abort(ctx, dispatchErr)
	}
	var pe *PoisonError
	if laneErr != nil && drainTimedOut && !errors.As(laneErr, &pe) {
		p.cfg.Logger.Warn().Err(laneErr).Stringer("drain_timeout", p.cfg.DrainTimeout).
			Msg("shutdown: sends still unacknowledged after the drain timeout; the broker transaction is aborted, so what it held will be sent again on the next start")
		laneErr = nil
	}
	if !x.boundary || laneErr != nil || !p.tracker.drained() {
		if err := p.abort(ctx, nil); err != nil {
			p.cfg.Logger.Warn().Err(err).Msg("the open broker transaction could not be aborted; the broker aborts it at its timeout or when the next start fences this producer")
		}
		return errors.Join(dispatchErr, laneErr)
	}
	err := p.commitOnce(ctx)
	if transientSave(err) {
		err = x.fails.final(err)
		if aerr := p.abort(ctx, nil); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	return errors.Join(dispatchErr, laneErr, err)
}

// abort aborts the open broker transaction and returns cause, joined with the abort's failure.
func (p *Pipeline) abort(ctx context.Context, cause error) error {
	if err := p.txn.c.Abort(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("abort the broker transaction: %w", err))
	}
	return cause
}

// waitDrained blocks until every event handed was acknowledged and every transaction taken in
// folded into the acknowledged set; it returns ctx's error if ctx ends first, or errClosed.
// Acknowledgements wake it (ack broadcasts space).
func (t *tracker) waitDrained(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitLocked(ctx, t.drainedLocked)
}

// drained reports, without waiting, what waitDrained waits for.
func (t *tracker) drained() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drainedLocked()
}

func (t *tracker) drainedLocked() bool {
	return t.events == 0 && len(t.queue) == 0 && t.ahead == nil
}

// committable is snapshotTxns with a copy of the acknowledged set, taken under one lock.
func (t *tracker) committable() (checkpoint.Checkpoint, gtid.Set, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkpointLocked(), t.acked.Clone(), t.ackedTxns, t.err
}
