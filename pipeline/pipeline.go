// Package pipeline moves transactions from the binlog reader to the sinks and owns the
// at-least-once rule: the checkpoint advances only over transactions whose every event, and
// every earlier transaction's events, a broker acknowledged.
//
// The shape: one dispatcher goroutine routes each transaction's events and hands them to
// lanes; each sink has several lanes, and a key always maps to the same lane, so one lane
// sending one batch at a time keeps per-key order while the lanes together keep many batches
// in flight. A tracker orders the transactions in flight, counts their unacknowledged events,
// and bounds the events and bytes held: when it is full the dispatcher, and through it the
// binlog reader, waits.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/sink"
)

// Router maps rows to encoded messages; *router.Router implements it.
type Router interface {
	Route(txn *binlog.Txn, ev *binlog.Event) (string, *sink.Message, error)
	// DeadLetter's code is the dead letter's outbox_dead_letter_code header: the pipeline
	// passes the reason label it counts in outboxd_dead_letters_total, so the two agree.
	DeadLetter(txn *binlog.Txn, ev *binlog.Event, code string, reason error) (string, *sink.Message, error)
}

// IndexedRouter is a Router that also reports which route matched (routes[index]), for the
// route label of the delivery metrics; *router.Router implements it.
type IndexedRouter interface {
	RouteIndexed(txn *binlog.Txn, ev *binlog.Event) (string, int, *sink.Message, error)
}

// Saver persists a checkpoint; every checkpoint.Storage implements it. Save blocks until the
// write is durable or ctx ends; on error the previous checkpoint stands, and checkpoint.Fix
// tells what the operator changes when saves keep failing.
type Saver interface {
	Save(ctx context.Context, c checkpoint.Checkpoint) error
}

// Poison policies.
const (
	PoisonStop       = "stop"
	PoisonDeadLetter = "dead_letter"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxInflightEvents = 20_000
	DefaultMaxInflightBytes  = 16 << 20
	DefaultLanes             = 16
	DefaultMaxBatchEvents    = 2048
	DefaultMaxBatchBytes     = 4 << 20
)

// Config is what a Pipeline needs. Router, Sinks, Saver and Start are required.
type Config struct {
	Router Router
	Sinks  map[string]sink.Sink
	Saver  Saver
	// Start is the executed GTID set the reader resumes from; acknowledged transactions are
	// added to a copy of it to form each checkpoint.
	Start gtid.Set
	// OnPoison is PoisonStop (default) or PoisonDeadLetter.
	OnPoison string
	// RetryInitial and RetryMax bound the backoff between resends of unacknowledged messages.
	RetryInitial, RetryMax time.Duration
	// CheckpointInterval is how often an advanced checkpoint is written (default 1s).
	CheckpointInterval time.Duration
	// MaxInflightEvents and MaxInflightBytes bound the events read but not yet acknowledged:
	// the pipeline's memory and its backpressure on the binlog reader.
	MaxInflightEvents, MaxInflightBytes int
	// Lanes is the number of concurrent senders per sink; a key always uses the same lane.
	Lanes int
	// MaxBatchEvents and MaxBatchBytes bound one Send of a lane.
	MaxBatchEvents, MaxBatchBytes int
	// DrainTimeout bounds how long sends may go on after the input context ends (default
	// 30s). Unacknowledged events are then left for the next run.
	DrainTimeout time.Duration
	// SaveFailureLimit is how long checkpoint saves may keep failing (retried meanwhile, with
	// reading paused) before Run stops with an error wrapping ErrCheckpointSave (default
	// DefaultSaveFailureLimit).
	SaveFailureLimit time.Duration
	// MissingTopicWait bounds how long messages wait for a topic the broker says does not
	// exist (default DefaultMissingTopicTimeout); then they follow OnPoison.
	MissingTopicWait time.Duration
	// Guard, when set, is asked before every send attempt; an error stops the pipeline at once,
	// as a ctx cancelled with ErrHalt does, and nothing more is sent. It is the leader's proof
	// that it still holds its lock (election.Term.Check): checked right before the broker is
	// written to, it keeps a leader that was paused past its lease from sending when it wakes
	// up, before its lock watcher has noticed. It must be cheap.
	Guard func() error
	// DeadLetterEvents are event ids an operator chose to dead-letter under on_poison: stop
	// (outboxd run --dead-letter-event), when found poison or waiting for a missing topic.
	// Each diversion is passed to Audit.
	DeadLetterEvents map[string]bool
	// DeadLetterWithoutPayload are event ids among DeadLetterEvents whose dead letter a broker
	// refused with the row's payload: in exactly-once mode, where a refusal cannot be answered
	// after the send, their dead letters go without it (HeaderPayloadOmitted), as a refused
	// dead letter is resent in at-least-once mode. The row stays in the outbox table.
	DeadLetterWithoutPayload map[string]bool
	// Audit records an operator override durably; nil records nothing.
	Audit  func(line string) error
	Logger zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RouteLabels are the route labels of the delivery metrics by route index
	// (config.Config.RouteLabels); a route without one is labelled with its index as text.
	RouteLabels []string
	// Metrics receives rows read, deliveries, failures, dead letters, send durations, retries,
	// sink reachability and checkpoint saves; nil records nothing.
	Metrics *metrics.Metrics
	// Cleanup, when set, is told which rows were delivered and which dead-lettered, and how far
	// each checkpoint save reaches (cleanup.go); nil costs the hot path nothing.
	Cleanup Cleanup
	// Transactions, when set, is exactly-once mode (txn.go): Saver must be a Committer, every
	// checkpoint is saved at a source-transaction boundary in the broker transaction of the
	// events it covers, CheckpointInterval is unused, and a failed send aborts the run instead of
	// being resent.
	Transactions *Transactions
}

// Pipeline delivers transactions. Create with New, then call Run once.
type Pipeline struct {
	cfg     Config
	tracker *tracker
	lanes   map[string][]*lane
	m       *metrics.Metrics
	// routeLabels caches the route label of each route index; owned by the dispatcher goroutine.
	routeLabels []string
	// tableLabels caches "schema.table" per outbox table; owned by the dispatcher goroutine.
	tableLabels map[tableKey]string
	// byLane groups a transaction's items by lane in hand; owned by the dispatcher goroutine.
	byLane map[*lane][]item
	xa     xaState // prepared XA transactions (xa.go)
	// gate pauses reading while checkpoint saves fail.
	gate *saveGate
	// stalls are the lanes' waits for missing topics.
	stalls stalls
	// halted is set when the run halts (ErrHalt): no send and no save from then on.
	halted atomic.Bool
	// halt ends the running Run with a cause wrapping ErrHalt; set by Run before the lanes start.
	halt func(error)
	// txn is exactly-once mode's state (txn.go); nil in at-least-once mode.
	txn *txnState
}

// ErrHalt, as the cause of Run's ctx (context.WithCancelCause) or wrapped by a Guard's failure,
// stops the pipeline at once: no drain of the batches queued in the lanes, no new send attempt,
// no final save. Run returns the cause. It is how a leader that lost its lock (fencing) stops:
// whatever was in flight is resent by the next leader, from the checkpoint.
var ErrHalt = errors.New("pipeline halted")

// New validates cfg and returns a Pipeline.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Router == nil || cfg.Saver == nil || len(cfg.Sinks) == 0 {
		return nil, errors.New("pipeline: Router, Saver and at least one sink are required")
	}
	if cfg.OnPoison == "" {
		cfg.OnPoison = PoisonStop
	}
	if cfg.OnPoison != PoisonStop && cfg.OnPoison != PoisonDeadLetter {
		return nil, fmt.Errorf("pipeline: on_poison %q is not stop or dead_letter", cfg.OnPoison)
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryInitial {
		cfg.RetryMax = max(10*time.Second, cfg.RetryInitial)
	}
	setDefault(&cfg.CheckpointInterval, time.Second)
	setDefault(&cfg.MaxInflightEvents, DefaultMaxInflightEvents)
	setDefault(&cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	setDefault(&cfg.Lanes, DefaultLanes)
	setDefault(&cfg.MaxBatchEvents, DefaultMaxBatchEvents)
	setDefault(&cfg.MaxBatchBytes, DefaultMaxBatchBytes)
	setDefault(&cfg.DrainTimeout, 30*time.Second)
	setDefault(&cfg.SaveFailureLimit, DefaultSaveFailureLimit)
	setDefault(&cfg.MissingTopicWait, DefaultMissingTopicTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Pipeline{
		cfg:     cfg,
		tracker: newTracker(cfg.Start, cfg.MaxInflightEvents, cfg.MaxInflightBytes),
		lanes:   make(map[string][]*lane, len(cfg.Sinks)),
		m:       cfg.Metrics,
		gate:    newSaveGate(),
	}
	if cfg.Transactions != nil {
		x, err := newTxnState(cfg)
		if err != nil {
			return nil, err
		}
		p.txn = x
	}
	p.routeLabels = append([]string(nil), cfg.RouteLabels...)
	if p.m != nil {
		p.tracker.observe = p.observeLatency
		p.m.InflightLimits(cfg.MaxInflightEvents, cfg.MaxInflightBytes)
	}
	for name, s := range cfg.Sinks {
		ls := make([]*lane, cfg.Lanes)
		for i := range ls {
			ls[i] = newLane(p, name, s)
		}
		p.lanes[name] = ls
	}
	return p, nil
}

func setDefault[T int | time.Duration](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Acked returns a copy of the executed set through the newest fully acknowledged transaction.
// Safe for concurrent use.
func (p *Pipeline) Acked() gtid.Set { return p.tracker.ackedSet() }

// InFlight reports the events and bytes read but not yet acknowledged. Safe for concurrent use.
func (p *Pipeline) InFlight() (events, bytes int) { return p.tracker.inFlight() }

// Oldest reports the commit time and read time of the oldest transaction not yet fully
// acknowledged; ok is false when there is none. Safe for concurrent use.
func (p *Pipeline) Oldest() (commit, read time.Time, ok bool) { return p.tracker.oldest() }

// OldestEvent names the first event of the oldest transaction with unacknowledged events (see
// OldestEvent); ok is false when every event read was acknowledged. It does not block beyond
// the tracker's lock and is safe for concurrent use.
func (p *Pipeline) OldestEvent() (OldestEvent, bool) { return p.tracker.oldestEvent() }

// ReadSet returns the executed set through the newest transaction the pipeline has taken in:
// the acknowledged set plus every transaction in flight. It costs a set copy plus one Add per
// transaction in flight: for status pages, not for every event. Safe for concurrent use.
func (p *Pipeline) ReadSet() gtid.Set { return p.tracker.readSet() }

// AckedTransactions counts the transactions acknowledged (folded into the checkpointable set)
// since New. Safe for concurrent use.
func (p *Pipeline) AckedTransactions() uint64 { return p.tracker.ackedCount() }

// Run takes transactions from in until ctx ends or in is closed, delivers their events and
// checkpoints acknowledged progress. When ctx ends it stops taking transactions, lets the
// sends in flight finish (bounded by DrainTimeout), saves the checkpoint and returns nil;
// sends still unacknowledged then are logged and left for the next start. It returns an
// error for a poison row under on_poison: stop (after delivering and checkpointing what came
// before it) or a checkpoint that could not be saved for SaveFailureLimit (wrapping
// ErrCheckpointSave; reading pauses while saves fail). Every return saves the checkpoint once
// more, even when nothing moved since the last save, unless saving is what failed. In every
// case the checkpoint written covers only acknowledged transactions.
//
// With Config.Transactions (exactly-once, txn.go) it commits on the way instead of saving on a
// timer; a failed send or an aborted commit ends it with a *TxnAbortedError after aborting the
// broker transaction, a fence with an error wrapping ErrHalt and sink.ErrFenced; at a shutdown
// it commits what was sent if all of it was acknowledged, else aborts, and returns nil.
func (p *Pipeline) Run(ctx context.Context, in <-chan *binlog.Txn) error {
	// runCtx also ends when the saver gives up: the pipeline then stops as on a shutdown.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	// Sends outlive runCtx by at most DrainTimeout so a shutdown does not abandon batches
	// that the broker is about to acknowledge; a halt (ErrHalt, a failed Guard) ends them at
	// once.
	sendCtx, cancelSend := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSend()
	stopDrain := context.AfterFunc(runCtx, func() {
		if errors.Is(context.Cause(runCtx), ErrHalt) {
			p.halted.Store(true)
			cancelSend()
			return
		}
		t := time.AfterFunc(p.cfg.DrainTimeout, cancelSend)
		context.AfterFunc(sendCtx, func() { t.Stop() })
	})
	defer stopDrain()
	p.halt = func(err error) {
		p.halted.Store(true)
		stopRun(err)
	}
	// haltedNow sets halted as soon as runCtx's cause is a halt, without waiting for stopDrain's
	// AfterFunc, which runs in a goroutine of its own: the steps below (the lanes' drain, the
	// final save) must see the halt when they start, not when that goroutine gets to run.
	haltedNow := func() {
		if errors.Is(context.Cause(runCtx), ErrHalt) {
			p.halted.Store(true)
			cancelSend()
		}
	}

	lanes, lanesCtx := errgroup.WithContext(sendCtx)
	for _, ls := range p.lanes {
		for _, l := range ls {
			lanes.Go(func() error { return l.run(lanesCtx) })
		}
	}
	saverDone := make(chan struct{})
	saverErr := make(chan error, 1)
	// Not runCtx: the final save runs after a shutdown ended it, and must still be written.
	saveCtx := context.WithoutCancel(ctx)
	if p.txn == nil {
		go func() { saverErr <- p.saveLoop(saveCtx, saverDone, stopRun) }()
	}

	// The dispatcher stops when runCtx ends (shutdown, saver gave up) or a lane failed.
	dispatchCtx, cancelDispatch := context.WithCancel(runCtx)
	defer cancelDispatch()
	stopOnLaneErr := context.AfterFunc(lanesCtx, cancelDispatch)
	defer stopOnLaneErr()
	dispatchErr := p.dispatch(dispatchCtx, in)
	haltedNow()

	for _, ls := range p.lanes {
		for _, l := range ls {
			l.close() // each lane sends what it holds, then returns
		}
	}
	laneErr := lanes.Wait()
	p.tracker.close()
	haltedNow()
	if p.txn != nil {
		if halt := context.Cause(runCtx); errors.Is(halt, ErrHalt) {
			return halt // nothing committed or aborted: the broker fenced this producer, or a new leader will
		}
		return p.endTxn(saveCtx, dispatchErr, laneErr, runCtx.Err() != nil && sendCtx.Err() != nil)
	}
	close(saverDone)
	saveErr := <-saverErr

	if halt := context.Cause(runCtx); errors.Is(halt, ErrHalt) {
		// Nothing sent after the halt, nothing saved by the final save (the saver refuses):
		// what was in flight is resent by whoever leads next.
		return halt
	}
	if laneErr != nil {
		var pe *PoisonError
		if runCtx.Err() != nil && sendCtx.Err() != nil && !errors.As(laneErr, &pe) {
			// A shutdown whose drain timed out loses nothing: the checkpoint saved above
			// covers only what was acknowledged (at the least the start position, saved
			// before streaming), and the rest is resent on the next start.
			p.cfg.Logger.Warn().Err(laneErr).Stringer("drain_timeout", p.cfg.DrainTimeout).
				Msg("shutdown: sends still unacknowledged after the drain timeout; the checkpoint stops before them, so they will be resent on the next start")
			laneErr = nil
		}
	}
	return errors.Join(dispatchErr, laneErr, saveErr)
}

// dispatch routes each transaction's events to lanes until ctx ends or in closes. It returns
// a *PoisonError for an unroutable row under on_poison: stop; nil otherwise.
func (p *Pipeline) dispatch(ctx context.Context, in <-chan *binlog.Txn) error {
	var open *entry // the transaction whose pieces are arriving
	for {
		var t *binlog.Txn
		if p.txn != nil {
			x, ok, err := p.txnReceive(ctx, in)
			if err != nil || !ok {
				return err
			}
			t = x
		} else {
			select {
			case <-ctx.Done():
				return nil
			case x, ok := <-in:
				if !ok {
					return nil
				}
				t = x
			}
		}
		// Checked with t in hand, so nothing received after a failed save goes out.
		if !p.gate.wait(ctx) {
			return nil // shutting down, or the saver gave up; t was never sent
		}
		items, size, err := p.route(t)
		if err != nil {
			return err
		}
		if p.xaPath(t) {
			stop, err := p.dispatchXA(ctx, t, items, size, &open)
			if err != nil || stop {
				return err
			}
		} else if !p.takeIn(ctx, t, items, size, &open) {
			return nil // shutting down; this piece was never sent, so nothing moves past it
		}
		if p.txn != nil {
			if err := p.txnHanded(ctx, in, len(items), size, open == nil); err != nil {
				return err
			}
		}
	}
}

// takeIn admits t, a transaction or a piece of one off the XA path, to the tracker and hands its
// items to the lanes; open is dispatch's entry of the transaction whose pieces are arriving. It
// returns false, with nothing of t taken in, when ctx ends while waiting for room.
func (p *Pipeline) takeIn(ctx context.Context, t *binlog.Txn, items []item, size int, open **entry) bool {
	if err := p.tracker.admit(ctx, len(items), size); err != nil {
		return false
	}
	if *open == nil && !t.Partial {
		e := p.tracker.beginWhole(t.GTID, t.CommitTime, t.CommitTimePrecise, p.cfg.Now(), items, t.OnlyCheckpoint, t.File, t.Pos)
		p.hand(items, e)
		return true
	}
	if *open == nil {
		*open = p.tracker.beginAt(t.GTID, t.CommitTime, t.CommitTimePrecise, p.cfg.Now())
	}
	e := *open
	p.tracker.extend(e, items)
	p.hand(items, e)
	if !t.Partial {
		if t.OnlyCheckpoint {
			p.tracker.markOwn(e)
		}
		p.tracker.finish(e, t.File, t.Pos)
		*open = nil
	}
	return true
}

// route maps every event of t to an item, applying on_poison to rows that cannot be routed.
func (p *Pipeline) route(t *binlog.Txn) ([]item, int, error) {
	items := make([]item, 0, len(t.Events))
	size := 0
	ir, indexed := p.cfg.Router.(IndexedRouter)
	// Exactly-once: listed rows are diverted here, a refused send cannot be (txn.go).
	listed := p.txn != nil && len(p.cfg.DeadLetterEvents) > 0
	run, runStart := 0, 0 // rows of one table in a row, counted as one metrics call
	for i := range t.Events {
		ev := &t.Events[i]
		if run > 0 && (ev.Schema != t.Events[runStart].Schema || ev.Table != t.Events[runStart].Table) {
			p.m.EventsRead(t.Events[runStart].Schema, t.Events[runStart].Table, run)
			run, runStart = 0, i
		}
		run++
		var name string
		var msg *sink.Message
		var err error
		idx := -1
		if indexed {
			name, idx, msg, err = ir.RouteIndexed(t, ev)
		} else {
			name, msg, err = p.cfg.Router.Route(t, ev)
		}
		dead := false
		if err != nil {
			reason := metrics.ReasonMalformed
			var rpe *router.PoisonError
			if errors.As(err, &rpe) && rpe.Reason == router.ReasonNoRoute {
				reason = metrics.ReasonNoRoute
			}
			if name, msg, err = p.poison(t, ev, err, reason, false); err != nil {
				return nil, 0, err
			}
			p.m.TableDeadLettered(p.tableLabel(ev), metrics.RouteNone)
			dead = true
		} else if listed && p.cfg.DeadLetterEvents[string(ev.EventID.Bytes)] {
			if name, msg, err = p.preDivert(t, ev, p.routeLabel(idx, false)); err != nil {
				return nil, 0, err
			}
			dead = true
		}
		it := item{txn: t, ev: ev, sink: name, msg: msg, dead: dead, size: msg.Size(), route: p.routeLabel(idx, dead), table: p.tableLabel(ev)}
		size += it.size
		items = append(items, it)
	}
	if run > 0 {
		p.m.EventsRead(t.Events[runStart].Schema, t.Events[runStart].Table, run)
	}
	return items, size, nil
}

// routeLabel is the route label of the delivery metrics: the route's index as text,
// "dead_letter" for dead letters, "" when the router does not say.
func (p *Pipeline) routeLabel(idx int, dead bool) string {
	if dead {
		return metrics.RouteDeadLetter
	}
	if idx < 0 {
		return ""
	}
	for len(p.routeLabels) <= idx {
		p.routeLabels = append(p.routeLabels, strconv.Itoa(len(p.routeLabels)))
	}
	return p.routeLabels[idx]
}

// tableLabel is the table label of the per-table metrics, "schema.table", built once per table.
func (p *Pipeline) tableLabel(ev *binlog.Event) string {
	k := tableKey{ev.Schema, ev.Table}
	if l, ok := p.tableLabels[k]; ok {
		return l
	}
	if p.tableLabels == nil {
		p.tableLabels = map[tableKey]string{}
	}
	l := ev.Schema + "." + ev.Table
	p.tableLabels[k] = l
	return l
}

type tableKey struct{ schema, table string }

// hand gives each item to its lane, one push per lane, keeping the items' order.
func (p *Pipeline) hand(items []item, e *entry) {
	if len(items) == 1 {
		items[0].entry = e
		p.laneFor(items[0].sink, items[0].msg).push(items[0])
		return
	}
	// byLane is the dispatcher's own (hand runs only there) and keeps its slices between
	// transactions: push copies the items, so they are cleared and reused.
	if p.byLane == nil {
		p.byLane = make(map[*lane][]item)
	}
	for i := range items {
		items[i].entry = e
		l := p.laneFor(items[i].sink, items[i].msg)
		p.byLane[l] = append(p.byLane[l], items[i])
	}
	for l, its := range p.byLane {
		if len(its) == 0 {
			continue
		}
		l.push(its...)
		clear(its) // drop the references to this transaction's messages
		if cap(its) > keepQueue {
			its = nil // let a large backing array go, as lanes do
		}
		p.byLane[l] = its[:0]
	}
}

// laneFor maps a message's key to its lane of the sink: always the same one, so one key never
// has two batches in flight. The key's hash is the one Kafka partitions by (sink.KeyHash), taken
// here while the row is fresh in the CPU's cache and kept in the message for the sink.
func (p *Pipeline) laneFor(sinkName string, msg *sink.Message) *lane {
	ls := p.lanes[sinkName]
	if len(ls) == 1 {
		return ls[0]
	}
	return ls[msg.KeyHash()%uint32(len(ls))]
}

// poison applies on_poison to a row that can never be delivered: under stop it returns the
// error that ends the run; under dead_letter it returns the dead-letter message instead.
// why is the dead-letter reason label (metrics.ReasonNoRoute, ReasonMalformed, ReasonRejected,
// ReasonTopicMissing). early says the row is diverted before on_poison would apply (a row
// waiting for its topic, listed in --dead-letter-event): an operator decision under either
// policy, so it is audited.
func (p *Pipeline) poison(t *binlog.Txn, ev *binlog.Event, reason error, why string, early bool) (string, *sink.Message, error) {
	eventID := string(ev.EventID.Bytes)
	override := (p.cfg.OnPoison != PoisonDeadLetter || early) && p.cfg.DeadLetterEvents[eventID]
	if p.cfg.OnPoison != PoisonDeadLetter && !override {
		return "", nil, &PoisonError{Err: reason, EventID: eventID}
	}
	name, msg, err := p.cfg.Router.DeadLetter(t, ev, why, reason)
	if err != nil {
		return "", nil, &PoisonError{Err: fmt.Errorf("%w; building its dead letter failed too: %w", reason, err), EventID: eventID}
	}
	p.m.DeadLettered(why)
	log := p.cfg.Logger.Warn()
	if override {
		// The operator chose to divert this one row (under on_poison: stop, or before its
		// topic's wait ended); leave a trace of that decision beside the checkpoint, not only
		// in the logs.
		log = log.Bool("operator_override", true)
		if p.cfg.Audit != nil {
			if err := p.cfg.Audit(fmt.Sprintf("dead-lettered event_id %q (table %s.%s, gtid %s) by --dead-letter-event: %v",
				eventID, ev.Schema, ev.Table, t.GTID, reason)); err != nil {
				return "", nil, fmt.Errorf("write the audit record for --dead-letter-event %s: %w", eventID, err)
			}
		}
	}
	log.Str("gtid", t.GTID).Str("table", ev.Schema+"."+ev.Table).
		Str("event_id", eventID).Str("sink", name).Str("topic", msg.Topic).
		AnErr("reason", reason).Msg("row dead-lettered")
	return name, msg, nil
}

// PoisonError ends a run under on_poison: stop. Err says which row and what to do.
type PoisonError struct {
	Err     error
	EventID string
}

func (e *PoisonError) Error() string {
	msg := "poison row, stopping (on_poison: stop): " + e.Err.Error()
	if e.EventID != "" {
		msg += fmt.Sprintf("; to divert just this row and go on, run once with --dead-letter-event %s (needs a dead_letter block; the decision is logged and written to the audit file beside the checkpoint)", e.EventID)
	}
	return msg
}

func (e *PoisonError) Unwrap() error { return e.Err }
