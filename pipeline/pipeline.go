// Package pipeline moves transactions from the binlog reader to the sinks and owns the
// at-least-once rule: the checkpoint advances only over transactions whose every event, and
// every earlier transaction's events, a broker acknowledged.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// Router maps rows to encoded messages; *router.Router implements it.
type Router interface {
	Route(txn *binlog.Txn, ev *binlog.Event) (string, *sink.Message, error)
	DeadLetter(txn *binlog.Txn, ev *binlog.Event, reason error) (string, *sink.Message, error)
}

// Saver persists a checkpoint; *checkpoint.Store implements it.
type Saver interface {
	Save(c checkpoint.Checkpoint) error
}

// Poison policies.
const (
	PoisonStop       = "stop"
	PoisonDeadLetter = "dead_letter"
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
	// MaxBatchEvents and MaxBatchBytes bound one round of sends (defaults 4096 events, 8 MiB).
	// A single transaction larger than that is still sent in one round.
	MaxBatchEvents, MaxBatchBytes int
	// DrainTimeout bounds how long in-flight sends may go on after the input context ends
	// (default 30s). Unacknowledged events are then left for the next run.
	DrainTimeout time.Duration
	Logger       zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Pipeline delivers transactions. Create with New, then call Run once.
type Pipeline struct {
	cfg Config

	acked     gtid.Set // the executed set through the newest fully acknowledged transaction
	ackedFile string
	ackedPos  uint32
	ackedTime time.Time
	dirty     bool // acked moved since the last save
	lastSave  time.Time
}

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
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.MaxBatchEvents <= 0 {
		cfg.MaxBatchEvents = 4096
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 8 << 20
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pipeline{cfg: cfg, acked: cfg.Start.Clone()}, nil
}

// Acked returns a copy of the executed set through the newest fully acknowledged transaction.
// Not safe to call concurrently with Run.
func (p *Pipeline) Acked() gtid.Set { return p.acked.Clone() }

// Run takes transactions from in until ctx ends or in is closed, delivers their events and
// checkpoints acknowledged progress. When ctx ends it stops taking transactions, lets the
// round in flight finish (bounded by DrainTimeout), saves the checkpoint and returns nil. It
// returns an error for a poison row under on_poison: stop or a failed checkpoint write. In
// every case the checkpoint written covers only acknowledged transactions; sends still
// unacknowledged when the drain times out are logged and left for the next start.
func (p *Pipeline) Run(ctx context.Context, in <-chan *binlog.Txn) error {
	// Sends outlive ctx by at most DrainTimeout so a shutdown does not abandon a round that
	// the broker is about to acknowledge.
	sendCtx, cancelSend := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSend()
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(p.cfg.DrainTimeout, cancelSend)
		context.AfterFunc(sendCtx, func() { t.Stop() })
	})
	defer stopDrain()

	tick := time.NewTicker(p.cfg.CheckpointInterval)
	defer tick.Stop()
	p.lastSave = p.cfg.Now()

	for {
		var first *binlog.Txn
		select {
		case <-ctx.Done():
			return p.finish(nil)
		case <-tick.C:
			if err := p.maybeSave(false); err != nil {
				return err
			}
			continue
		case t, ok := <-in:
			if !ok {
				return p.finish(nil)
			}
			first = t
		}
		batch := p.gather(first, in)
		if err := p.deliver(sendCtx, batch); err != nil {
			var pe *PoisonError
			if ctx.Err() != nil && sendCtx.Err() != nil && !errors.As(err, &pe) {
				// A requested shutdown whose drain timed out loses nothing: the checkpoint
				// covers only what was acknowledged, and the rest is resent on the next start.
				p.cfg.Logger.Warn().Err(err).Dur("drain_timeout", p.cfg.DrainTimeout).
					Msg("shutdown: sends still unacknowledged after the drain timeout; they will be resent on the next start")
				return p.finish(nil)
			}
			return p.finish(err)
		}
		if err := p.maybeSave(false); err != nil {
			return err
		}
	}
}

// gather takes first and whatever else is already waiting, up to the batch limits. It never
// waits for more: at low rates each transaction goes out at once, at high rates rounds fill.
func (p *Pipeline) gather(first *binlog.Txn, in <-chan *binlog.Txn) []*binlog.Txn {
	batch := []*binlog.Txn{first}
	events, size := countTxn(first)
	for events < p.cfg.MaxBatchEvents && size < p.cfg.MaxBatchBytes {
		select {
		case t, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, t)
			n, b := countTxn(t)
			events += n
			size += b
		default:
			return batch
		}
	}
	return batch
}

func countTxn(t *binlog.Txn) (events, size int) {
	for i := range t.Events {
		size += t.Events[i].Size()
	}
	return len(t.Events), size
}

// finish saves what is acknowledged and returns cause (or the save's error).
func (p *Pipeline) finish(cause error) error {
	if err := p.maybeSave(true); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// maybeSave writes the checkpoint when it moved and the interval has passed (or force).
func (p *Pipeline) maybeSave(force bool) error {
	if !p.dirty {
		return nil
	}
	now := p.cfg.Now()
	if !force && now.Sub(p.lastSave) < p.cfg.CheckpointInterval {
		return nil
	}
	// p.acked only ever holds transactions whose events, and all earlier ones', were
	// acknowledged (see markAcked): saving anything newer could lose messages on a crash.
	c := checkpoint.Checkpoint{
		Flavor:     p.acked.Flavor(),
		GTIDSet:    p.acked.String(),
		File:       p.ackedFile,
		Pos:        p.ackedPos,
		CommitTime: p.ackedTime,
		SavedAt:    now,
	}
	if err := p.cfg.Saver.Save(c); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", c.GTIDSet, err)
	}
	p.dirty = false
	p.lastSave = now
	p.cfg.Logger.Debug().Str("gtid_set", c.GTIDSet).Msg("checkpoint saved")
	return nil
}

// markAcked records that every event of batch was acknowledged. Rounds run one after the
// other, so every earlier transaction was acknowledged before this one.
func (p *Pipeline) markAcked(batch []*binlog.Txn) error {
	for _, t := range batch {
		if t.GTID != "" {
			if err := p.acked.Add(t.GTID); err != nil {
				return fmt.Errorf("record acknowledged transaction %s: %w", t.GTID, err)
			}
		}
		if t.File != "" {
			p.ackedFile = t.File
		}
		p.ackedPos = t.Pos
		p.ackedTime = t.CommitTime
		p.dirty = true
	}
	return nil
}

// item is one message on its way to a sink, with the row it came from for dead letters and
// error messages.
type item struct {
	txn  *binlog.Txn
	ev   *binlog.Event
	msg  *sink.Message
	dead bool // msg is already the dead letter
}

// deliver routes every event of batch and sends the messages until all are acknowledged.
func (p *Pipeline) deliver(ctx context.Context, batch []*binlog.Txn) error {
	bySink := map[string][]item{}
	for k, t := range batch {
		// Route the whole transaction before adding any of it, so a poison row under stop
		// leaves the transactions before it to be delivered and checkpointed.
		var txnItems []struct {
			name string
			it   item
		}
		for i := range t.Events {
			ev := &t.Events[i]
			name, msg, err := p.cfg.Router.Route(t, ev)
			dead := false
			if err != nil {
				if name, msg, err = p.poison(t, ev, err); err != nil {
					if k > 0 {
						if derr := p.deliverRouted(ctx, batch[:k], bySink); derr != nil {
							return errors.Join(err, derr)
						}
					}
					return err
				}
				dead = true
			}
			txnItems = append(txnItems, struct {
				name string
				it   item
			}{name, item{txn: t, ev: ev, msg: msg, dead: dead}})
		}
		for _, x := range txnItems {
			bySink[x.name] = append(bySink[x.name], x.it)
		}
	}
	return p.deliverRouted(ctx, batch, bySink)
}

// deliverRouted sends the routed messages of batch and marks batch acknowledged.
func (p *Pipeline) deliverRouted(ctx context.Context, batch []*binlog.Txn, bySink map[string][]item) error {
	if err := p.sendAll(ctx, bySink); err != nil {
		return err
	}
	return p.markAcked(batch)
}

// poison applies on_poison to a row that can never be delivered: under stop it returns the
// error that ends the run; under dead_letter it returns the dead-letter message instead.
func (p *Pipeline) poison(t *binlog.Txn, ev *binlog.Event, reason error) (string, *sink.Message, error) {
	if p.cfg.OnPoison != PoisonDeadLetter {
		return "", nil, &PoisonError{Err: reason}
	}
	name, msg, err := p.cfg.Router.DeadLetter(t, ev, reason)
	if err != nil {
		return "", nil, &PoisonError{Err: fmt.Errorf("%w; building its dead letter failed too: %w", reason, err)}
	}
	p.cfg.Logger.Warn().Str("gtid", t.GTID).Str("table", ev.Schema+"."+ev.Table).
		Str("event_id", string(ev.EventID.Bytes)).Str("sink", name).Str("topic", msg.Topic).
		AnErr("reason", reason).Msg("row dead-lettered")
	return name, msg, nil
}

// PoisonError ends a run under on_poison: stop. Err says which row and what to do.
type PoisonError struct{ Err error }

func (e *PoisonError) Error() string {
	return "poison row, stopping (on_poison: stop): " + e.Err.Error()
}

func (e *PoisonError) Unwrap() error { return e.Err }

// sendAll sends each sink's messages concurrently and returns when all are acknowledged,
// when a poison row stops the run, or when ctx ends.
func (p *Pipeline) sendAll(ctx context.Context, bySink map[string][]item) error {
	var dlMu sync.Mutex
	var deadLetters map[string][]item
	g, gctx := errgroup.WithContext(ctx)
	for name, items := range bySink {
		s, ok := p.cfg.Sinks[name]
		if !ok {
			return fmt.Errorf("route names sink %q, which is not configured", name)
		}
		g.Go(func() error {
			rejected, err := p.sendUntilAcked(gctx, name, s, items)
			if err != nil || len(rejected) == 0 {
				return err
			}
			dlMu.Lock()
			defer dlMu.Unlock()
			for _, it := range rejected {
				dn, dm, err := p.poison(it.txn, it.ev, it.err)
				if err != nil {
					return err
				}
				if deadLetters == nil {
					deadLetters = map[string][]item{}
				}
				deadLetters[dn] = append(deadLetters[dn], item{txn: it.txn, ev: it.ev, msg: dm, dead: true})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if len(deadLetters) > 0 {
		return p.sendAll(ctx, deadLetters)
	}
	return nil
}

// rejection is a message a broker refused for good.
type rejection struct {
	item
	err error
}

// sendUntilAcked sends items to s, resending unacknowledged ones with capped exponential
// backoff, forever: a broker outage stalls the stream rather than skipping events. Resends keep
// slice order and the Sink contract fails every same-key follower of a failed message, so a
// later event of a key never overtakes an earlier one. It returns the messages the broker
// rejected permanently, for the caller's poison policy.
func (p *Pipeline) sendUntilAcked(ctx context.Context, name string, s sink.Sink, items []item) ([]rejection, error) {
	var rejected []rejection
	backoff := p.cfg.RetryInitial
	attempt := 0
	var lastLog time.Time
	for len(items) > 0 {
		msgs := make([]*sink.Message, len(items))
		for i := range items {
			msgs[i] = items[i].msg
		}
		err := s.Send(ctx, msgs)
		if err == nil {
			return rejected, nil
		}
		var se *sink.SendError
		if !errors.As(err, &se) {
			se = sink.AllFailed(len(items), err)
		}
		retry := make([]item, 0, len(se.Failures))
		for _, f := range se.Failures {
			if f.Index < 0 || f.Index >= len(items) {
				return nil, fmt.Errorf("sink %s reported failure of message %d of %d", name, f.Index, len(items))
			}
			it := items[f.Index]
			if sink.IsPermanent(f.Err) {
				if it.dead {
					return nil, &PoisonError{Err: fmt.Errorf("dead letter for event %s rejected by sink %s: %w",
						it.msg.EventID, name, f.Err)}
				}
				rejected = append(rejected, rejection{item: it, err: fmt.Errorf("rejected by sink %s topic %s: %w",
					name, it.msg.Topic, f.Err)})
				continue
			}
			retry = append(retry, it)
		}
		if len(retry) < len(items) {
			backoff, attempt = p.cfg.RetryInitial, 0 // progress: start the backoff over
		}
		items = retry
		if len(items) == 0 {
			break
		}
		attempt++
		if now := p.cfg.Now(); now.Sub(lastLog) >= 5*time.Second || attempt == 1 {
			lastLog = now
			p.cfg.Logger.Warn().Str("sink", name).Int("unacked", len(items)).Int("attempt", attempt).
				Dur("backoff", backoff).Str("gtid", items[0].txn.GTID).Err(err).Msg("send not acknowledged, retrying")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("sink %s: %d message(s) still unacknowledged at shutdown: %w", name, len(items), ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, p.cfg.RetryMax)
	}
	return rejected, nil
}
