package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/internal/wait"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/sink"
)

// item is one message on its way to a sink, with the row it came from (for dead letters and
// error messages) and the transaction it acknowledges.
type item struct {
	txn   *binlog.Txn
	ev    *binlog.Event
	sink  string
	msg   *sink.Message
	dead  bool // msg is already the dead letter
	size  int
	route string // the route label of the delivery metrics
	table string // the table label of the per-table metrics ("schema.table")
	entry *entry
	// missingSince is when a send of msg first failed because its topic does not exist; zero
	// while it has not. It bounds the wait for the topic (Config.MissingTopicWait).
	missingSince time.Time
}

// keepQueue is the largest queue backing array (in items) a lane keeps for reuse once empty.
const keepQueue = 512

// lane sends one sink's messages for a subset of keys, one batch at a time: a key always maps
// to the same lane, so no key ever has two batches in flight.
type lane struct {
	p    *Pipeline
	name string
	s    sink.Sink

	mu     sync.Mutex
	queue  []item
	closed bool
	wake   chan struct{}
}

func newLane(p *Pipeline, name string, s sink.Sink) *lane {
	return &lane{p: p, name: name, s: s, wake: make(chan struct{}, 1)}
}

// push queues items; it never blocks (the tracker's capacity bounds what is queued).
func (l *lane) push(items ...item) {
	l.mu.Lock()
	l.queue = append(l.queue, items...)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// close makes run return once the queue is empty.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take removes up to a batch of queued items; it returns nil when the lane is closed and
// empty. It waits while the queue is empty.
func (l *lane) take(ctx context.Context) ([]item, error) {
	for {
		l.mu.Lock()
		if n := len(l.queue); n > 0 {
			cfg := l.p.cfg
			k, size := 0, 0
			for k < n && k < cfg.MaxBatchEvents && (k == 0 || size+l.queue[k].size <= cfg.MaxBatchBytes) {
				size += l.queue[k].size
				k++
			}
			batch := make([]item, k)
			copy(batch, l.queue[:k])
			clear(l.queue[:k])
			switch {
			case k < n:
				l.queue = l.queue[k:]
			case cap(l.queue) <= keepQueue:
				// Reused: a 1-row catch-up otherwise regrew every lane's queue from nil
				// (1, 2, 4, 8 items) between two takes.
				l.queue = l.queue[:0]
			default:
				l.queue = nil // let a large backing array go
			}
			l.mu.Unlock()
			return batch, nil
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, nil
		}
		select {
		case <-l.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// run sends batches until the lane is closed and empty or a fatal error.
func (l *lane) run(ctx context.Context) error {
	for {
		batch, err := l.take(ctx)
		if err != nil || batch == nil {
			return err
		}
		if err := l.deliver(ctx, batch); err != nil {
			return err
		}
	}
}

// deliver sends batch until every message is acknowledged, applies on_poison to messages the
// broker rejected for good, and acknowledges the batch's events to the tracker: each as soon
// as the broker acknowledged it (so a message that waits, for a missing topic say, holds
// neither the checkpoint of the transactions before it nor the in-flight capacity of the
// rest of its batch), and the rejected ones once their dead letters are stored. When the run
// stops on a rejected row, what the broker acknowledged still counts: the checkpoint written
// at the stop reaches up to the transaction of the first unacknowledged row (acknowledged
// messages of later transactions do not move it; the tracker only folds in transactions with
// nothing unacknowledged below).
func (l *lane) deliver(ctx context.Context, batch []item) error {
	p := l.p
	ack := p.tracker.ack
	if p.cfg.Cleanup != nil {
		ack = func(items []item) { p.ackTracked(items, false) }
	}
	rejected, err := p.sendUntilAcked(ctx, l.name, l.s, batch, ack)
	if err != nil {
		return err
	}
	if len(rejected) == 0 {
		return nil
	}
	if err := p.divert(ctx, rejected); err != nil {
		return err
	}
	done := make([]item, len(rejected))
	for i, r := range rejected {
		done[i] = r.item
	}
	p.tracker.ack(done) // dead letters: never handed to Cleanup
	return nil
}

// divert applies on_poison to rejected and sends their dead letters until acknowledged. It
// returns the error that ends the run: a PoisonError under stop, a dead letter refused (or
// whose topic never appeared), or ctx ending first.
func (p *Pipeline) divert(ctx context.Context, rejected []rejection) error {
	bySink := map[string][]item{}
	for _, r := range rejected {
		why := r.why
		if why == "" {
			why = metrics.ReasonRejected
		}
		dn, dm, err := p.poison(r.txn, r.ev, r.err, why, r.early)
		if err != nil {
			return err
		}
		p.m.TableDeadLettered(r.table, r.route)
		bySink[dn] = append(bySink[dn], item{txn: r.txn, ev: r.ev, sink: dn, msg: dm, dead: true, route: metrics.RouteDeadLetter, table: r.table})
	}
	for dn, dls := range bySink {
		ds, ok := p.cfg.Sinks[dn]
		if !ok {
			return fmt.Errorf("dead_letter.sink %q is not configured", dn)
		}
		// Dead letters are not tracked themselves: their rows are acknowledged by deliver.
		if _, err := p.sendUntilAcked(ctx, dn, ds, dls, nil); err != nil {
			return err
		}
	}
	return nil
}

// rejection is a message a broker refused for good, or whose topic did not appear in time.
type rejection struct {
	item
	err error
	why string // the dead-letter reason label; "" means metrics.ReasonRejected
	// early: diverted by --dead-letter-event before on_poison applied (see poison).
	early bool
}

// sendUntilAcked sends items to s, resending unacknowledged ones with capped exponential
// backoff, forever: a broker outage stalls the stream rather than skipping events. Resends keep
// slice order and the Sink contract fails every same-key follower of a failed message, so a
// later event of a key never overtakes an earlier one. A message whose topic does not exist is
// retried the same way, but only for MissingTopicWait (see waitForTopic). It returns the
// messages the broker rejected permanently or whose topic never appeared, for the caller's
// poison policy (under on_poison: stop, the later messages of such a message's key are then
// left unsent and unacknowledged: the run ends on it), or an error when ctx ends first or a dead letter itself is rejected (or its
// topic never appeared).
func (p *Pipeline) sendUntilAcked(ctx context.Context, name string, s sink.Sink, items []item, acked func([]item)) ([]rejection, error) {
	var rejected []rejection
	topics := topicWait{p: p, sink: name}
	defer topics.done()
	backoff := wait.Backoff{Initial: p.cfg.RetryInitial, Max: p.cfg.RetryMax}
	attempt := 0
	var lastLog time.Time
	msgs := make([]*sink.Message, 0, len(items))
	// stopKeys are the keys of rejections that will end the run (on_poison: stop, see
	// stopsRun): their later messages are not resent, or a fix and a restart would deliver the
	// rejected row after them.
	var stopKeys map[string]bool
	reject := func(r rejection) {
		rejected = append(rejected, r)
		if r.msg.Key != nil && acked != nil && p.stopsRun(r) {
			if stopKeys == nil {
				stopKeys = map[string]bool{}
			}
			stopKeys[string(r.msg.Key)] = true
		}
	}
	for len(items) > 0 {
		msgs = msgs[:0]
		for i := range items {
			msgs = append(msgs, items[i].msg)
		}
		if attempt > 0 {
			p.m.Retry(name)
		}
		if p.halted.Load() {
			return rejected, ErrHalt
		}
		if g := p.cfg.Guard; g != nil {
			if err := g(); err != nil {
				err = fmt.Errorf("%w: %w", ErrHalt, err)
				if p.halt != nil {
					p.halt(err)
				}
				return rejected, err
			}
		}
		began := time.Now()
		err := s.Send(ctx, msgs)
		p.m.SendDuration(name, time.Since(began))
		if err == nil {
			p.m.SinkResult(name, nil)
			p.countDelivered(name, items)
			p.topicAcked(name, items)
			if acked != nil {
				acked(items)
			}
			return rejected, nil
		}
		var se *sink.SendError
		if !errors.As(err, &se) || se == nil || len(se.Failures) == 0 {
			// An error that names no failed message proves nothing was acknowledged.
			se = sink.AllFailed(len(items), err)
		}
		for i, f := range se.Failures {
			// Checked before anything counts as acknowledged: a sink that reports nonsense
			// has proven nothing.
			if f.Index < 0 || f.Index >= len(items) || i > 0 && f.Index <= se.Failures[i-1].Index {
				return nil, fmt.Errorf("sink %s reported failure of message %d of %d (failures must be sorted, each once)", name, f.Index, len(items))
			}
		}
		if p.txn != nil {
			// Exactly-once: no resend, the broker transaction is doomed (txn.go).
			return nil, p.txnSendFailed(ctx, name, items, err, se)
		}
		if ctx.Err() == nil {
			// The sink is down when it acknowledged nothing and every failure was transient; a
			// permanent rejection or a missing topic is an answer from a reachable broker.
			transient := 0
			for _, f := range se.Failures {
				if !sink.IsPermanent(f.Err) && !sink.IsTopicMissing(f.Err) {
					transient++
				}
			}
			if transient == len(items) {
				p.m.SinkResult(name, err)
			} else {
				p.m.SinkResult(name, nil)
			}
		}
		if got := ackedItems(items, se.Failures); len(got) > 0 {
			p.countDelivered(name, got)
			p.topicAcked(name, got)
			if acked != nil {
				acked(got)
			}
		}
		retry := make([]item, 0, len(se.Failures))
		var waiting []item // retried for want of their topic
		waitingKeys := map[string]bool{}
		others := 0 // other transient failures, not held back behind a waiting message
		for _, f := range se.Failures {
			it := items[f.Index]
			if it.msg.Key != nil && stopKeys[string(it.msg.Key)] {
				continue // held back behind a row the run stops on; resent by the next start
			}
			kind := metrics.KindTransient
			switch {
			case sink.IsPermanent(f.Err):
				kind = metrics.KindPermanent
			case sink.IsTopicMissing(f.Err):
				kind = metrics.KindTopicMissing
			}
			p.m.Failed(name, it.route, kind, 1)
			if kind == metrics.KindTopicMissing {
				r, err := p.waitForTopic(name, &it, f.Err)
				if err != nil {
					return nil, err
				}
				if r != nil {
					reject(*r)
					continue
				}
				retry = append(retry, it)
				waiting = append(waiting, it)
				if it.msg.Key != nil {
					waitingKeys[it.msg.Topic+"\x00"+string(it.msg.Key)] = true
				}
				continue
			}
			if kind == metrics.KindTransient && (it.msg.Key == nil || !waitingKeys[it.msg.Topic+"\x00"+string(it.msg.Key)]) {
				others++
			}
			if kind == metrics.KindPermanent {
				if it.dead {
					if stripped, ok := withoutPayload(it.msg); ok {
						// A dead letter is refused for good mostly because the row's payload is
						// what is wrong with it (too large). Send the rest: the reason, the
						// headers and the row's table, id and GTID say where to find it.
						it.msg = stripped
						retry = append(retry, it)
						continue
					}
					return nil, &PoisonError{Err: fmt.Errorf("dead letter for %s rejected by sink %s: %w", describe(it), name, f.Err)}
				}
				reject(rejection{item: it, err: fmt.Errorf("%s rejected by sink %s topic %s: %w",
					describe(it), name, it.msg.Topic, f.Err)})
				continue
			}
			retry = append(retry, it)
		}
		topics.update(waiting)
		if len(retry) < len(items) {
			backoff.Reset() // progress: start the backoff over
			attempt = 0
		}
		items = retry
		if len(items) == 0 {
			break
		}
		attempt++
		// Waits for missing topics are logged once per topic by the stall registry, not here.
		if now := p.cfg.Now(); (len(waiting) == 0 || others > 0) && (attempt == 1 || now.Sub(lastLog) >= 5*time.Second) {
			lastLog = now
			p.cfg.Logger.Warn().Str("sink", name).Int("unacked", len(items)).Int("attempt", attempt).
				Stringer("backoff", backoff.Next()).Str("gtid", items[0].txn.GTID).Err(err).Msg("send not acknowledged, retrying")
		}
		if !backoff.Wait(ctx) {
			return nil, fmt.Errorf("sink %s: %d message(s) still unacknowledged at shutdown: %w", name, len(items), ctx.Err())
		}
	}
	return rejected, nil
}

// stopsRun reports whether poison will end the run for r instead of dead-lettering it.
func (p *Pipeline) stopsRun(r rejection) bool {
	return p.cfg.OnPoison != PoisonDeadLetter && !r.dead && !p.cfg.DeadLetterEvents[string(r.ev.EventID.Bytes)]
}

// ackedItems returns the items of one Send that are not among failures (sorted by index).
func ackedItems(items []item, failures []sink.Failure) []item {
	out := make([]item, 0, len(items)-min(len(items), len(failures)))
	fi := 0
	for i := range items {
		for fi < len(failures) && failures[fi].Index < i {
			fi++
		}
		if fi < len(failures) && failures[fi].Index == i {
			continue
		}
		out = append(out, items[i])
	}
	return out
}

// countDelivered counts items, the acknowledged messages of one Send (see ackedItems), as
// delivered, one metrics call per run of items with the same route.
func (p *Pipeline) countDelivered(name string, items []item) {
	if p.m == nil {
		return
	}
	run, route := 0, ""
	trun, table, troute := 0, "", "" // the run of one table and route, for the per-table series
	for i := range items {
		if run > 0 && items[i].route != route {
			p.m.Delivered(name, route, run)
			run = 0
		}
		if trun > 0 && (items[i].table != table || items[i].route != troute) {
			p.countTable(table, troute, trun)
			trun = 0
		}
		route = items[i].route
		table, troute = items[i].table, items[i].route
		run++
		trun++
	}
	p.m.Delivered(name, route, run)
	p.countTable(table, troute, trun)
}

// countTable counts n deliveries of table on route; items built without a table label (tests
// of lanes alone) are not counted per table.
func (p *Pipeline) countTable(table, route string, n int) {
	if table != "" {
		p.m.TableDelivered(table, route, n)
	}
}

// describe names an item's row for operators.
func describe(it item) string {
	id := ""
	if it.ev.ID != "" {
		id = "id " + it.ev.ID + ", "
	}
	return fmt.Sprintf("outbox row in %s.%s (%sevent_id %q, gtid %s)", it.ev.Schema, it.ev.Table, id, it.ev.EventID.Bytes, it.txn.GTID)
}

// HeaderPayloadOmitted marks a dead letter sent without the row's payload because the broker
// refused it with the payload; its value is the payload's size in bytes.
const HeaderPayloadOmitted = "outbox_dead_letter_payload_omitted"

// withoutPayload returns a copy of a dead letter without its value, or false if it has none
// left to drop.
func withoutPayload(m *sink.Message) (*sink.Message, bool) {
	if len(m.Value) == 0 {
		return nil, false
	}
	for _, h := range m.Headers {
		if h.Key == HeaderPayloadOmitted {
			return nil, false
		}
	}
	c := *m
	c.Value = nil
	c.Headers = append(append([]sink.Header(nil), m.Headers...),
		sink.Header{Key: HeaderPayloadOmitted, Value: []byte(strconv.Itoa(len(m.Value)))})
	return &c, true
}
