package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/metrics"
)

// Two-phase XA transactions.
//
// The rows of an XA transaction are written to the binlog at XA PREPARE, in a group of their own,
// but become visible only at XA COMMIT, a later group that may come after any number of other
// transactions (see binlog/xa.go). So the dispatcher routes a prepared group's rows and holds
// them, without handing them to a lane, until the XA COMMIT of the same xid arrives; then they
// go to the lanes after everything that committed before that commit, which keeps per-key order
// in commit order. XA ROLLBACK discards them.
//
// The prepared group stays in the tracker as an entry with unacknowledged events, so the
// checkpoint stays at the transaction before the prepare until the committed rows, and every
// transaction up to the XA COMMIT, are acknowledged (tracker.pair): a restart re-reads the
// prepare, and its XA COMMIT still finds the rows; a checkpoint between the two would not. (A
// MariaDB position cannot skip a transaction, so nothing better is possible there; transactions
// acknowledged after the prepare are resent after such a restart.)
//
// Held rows count against max_inflight_events/bytes like rows in flight, but they cannot be
// freed by any acknowledgement until a later part of the stream arrives. Rows that would push
// the held total past the capacity, which would stall the reader for good, stop the run with an
// *XACapacityError instead.

// xaHold is one XA group's routed rows, waiting for its XA COMMIT.
type xaHold struct {
	entry         *entry // the prepared group in the tracker; pins the checkpoint below it
	items         []item
	events, bytes int
	xid           binlog.XID
	gtid          string
	file          string
	pos           uint32
	preparedAt    time.Time // the prepare's binlog timestamp, for the age gauge
}

// xaState is the dispatcher's XA bookkeeping. open and prepared are owned by the dispatcher
// goroutine; mu guards prepared for the gauges read at scrape time.
type xaState struct {
	open     *xaHold // the XA group whose pieces are arriving
	mu       sync.Mutex
	prepared map[binlog.XID]*xaHold
}

// PreparedXA reports how many prepared XA transactions wait for their XA COMMIT or XA ROLLBACK
// and the prepare time of the oldest (zero when none). Each one holds the checkpoint below its
// XA PREPARE. Safe for concurrent use.
func (p *Pipeline) PreparedXA() (n int, oldest time.Time) {
	p.xa.mu.Lock()
	defer p.xa.mu.Unlock()
	for _, h := range p.xa.prepared {
		if oldest.IsZero() || h.preparedAt.Before(oldest) {
			oldest = h.preparedAt
		}
	}
	return len(p.xa.prepared), oldest
}

// XACapacityError stops a run when prepared XA rows would hold more than the pipeline's in-flight
// capacity until their XA COMMIT.
type XACapacityError struct {
	GTID                        string
	HeldEvents, HeldBytes       int // held by prepared XA transactions, including this piece
	MaxEvents, MaxBytes         int
	PreparedTransactions, Piece int
}

func (e *XACapacityError) Error() string {
	return fmt.Sprintf("XA transaction %s: its rows and those of %d other prepared XA transactions would hold %d events (%d bytes) until their XA COMMIT, "+
		"more than pipeline.max_inflight_events=%d / pipeline.max_inflight_bytes=%d, so the binlog reader could never reach the XA COMMIT; "+
		"raise pipeline.max_inflight_events and pipeline.max_inflight_bytes above that and restart",
		e.GTID, e.PreparedTransactions, e.HeldEvents, e.HeldBytes, e.MaxEvents, e.MaxBytes)
}

// XAUnknownError stops a run at an XA COMMIT whose XA PREPARE this run never read: it lies
// before the position the run started from (start: latest, --from-gtid, a checkpoint set past
// it), so its rows cannot be delivered.
type XAUnknownError struct {
	XID        binlog.XID
	CommitGTID string
	Start      string
}

func (e *XAUnknownError) Error() string {
	return fmt.Sprintf("XA COMMIT %s (gtid %s) commits an XA transaction whose XA PREPARE, which holds its rows, lies before the start position %q: "+
		"its outbox rows cannot be read from there. Start from a position before that XA PREPARE (outboxd checkpoint set --gtid <position before it>) to deliver them, "+
		"or, to accept that they are not sent, set the checkpoint to a position that includes %s",
		e.XID, e.CommitGTID, e.Start, e.CommitGTID)
}

// xaPath reports whether t takes the XA path of dispatch: every XA step except a one-phase XA
// commit with no pieces held, which is an ordinary transaction.
func (p *Pipeline) xaPath(t *binlog.Txn) bool {
	return t.XA != nil && (t.XA.Op != binlog.XAOnePhase || p.xa.open != nil)
}

// dispatchXA takes one XA step. open is dispatch's entry of the transaction whose pieces are
// arriving. stop is set when the pipeline is shutting down before t was taken in.
func (p *Pipeline) dispatchXA(ctx context.Context, t *binlog.Txn, items []item, size int, open **entry) (stop bool, err error) {
	switch t.XA.Op {
	case binlog.XAPending, binlog.XAPrepare, binlog.XAOnePhase:
		return p.xaGroup(ctx, t, items, size, open)
	case binlog.XACommit, binlog.XARollback:
		return p.xaEnd(ctx, t, items, size)
	}
	return false, fmt.Errorf("transaction %s: unknown XA step %s", t.GTID, t.XA.Op)
}

// xaGroup holds the rows of a piece of an XA group; at the group's end it keeps them until the
// XA COMMIT (prepared) or hands them on (one phase).
func (p *Pipeline) xaGroup(ctx context.Context, t *binlog.Txn, items []item, size int, open **entry) (bool, error) {
	if err := p.tracker.admitHeld(ctx, t.GTID, len(items), size, p.xaCount()); err != nil {
		var ce *XACapacityError
		if errors.As(err, &ce) {
			return false, err
		}
		return true, nil // shutting down; nothing of this piece was taken in
	}
	if *open == nil {
		*open = p.tracker.begin(t.GTID, t.CommitTime, p.cfg.Now())
	}
	if p.xa.open == nil {
		p.xa.open = &xaHold{entry: *open, gtid: t.GTID}
	}
	h := p.xa.open
	h.items = append(h.items, items...)
	h.events += len(items)
	h.bytes += size
	p.tracker.extend(*open, items)
	switch t.XA.Op {
	case binlog.XAOnePhase:
		p.xa.open = nil
		p.tracker.unhold(h.events, h.bytes)
		p.hand(h.items, h.entry)
		p.tracker.finish(h.entry, t.File, t.Pos)
		*open = nil
	case binlog.XAPrepare:
		p.xa.open = nil
		*open = nil
		h.xid, h.file, h.pos, h.preparedAt = t.XA.XID, t.File, t.Pos, t.CommitTime
		if h.preparedAt.IsZero() {
			h.preparedAt = h.entry.readAt
		}
		p.xa.mu.Lock()
		prev := p.xa.prepared[h.xid]
		if prev == nil {
			if p.xa.prepared == nil {
				p.xa.prepared = map[binlog.XID]*xaHold{}
			}
			p.xa.prepared[h.xid] = h
		}
		p.xa.mu.Unlock()
		if prev != nil {
			return false, fmt.Errorf("XA PREPARE %s (gtid %s): the same xid is already prepared (gtid %s) and was neither committed nor rolled back in between; "+
				"outboxd cannot tell which rows an XA COMMIT would commit", h.xid, h.gtid, prev.gtid)
		}
		p.cfg.Logger.Debug().Str("gtid", h.gtid).Stringer("xid", h.xid).Int("events", h.events).
			Msg("XA prepared: its rows are held until XA COMMIT; the checkpoint stays before it")
	}
	return false, nil
}

// xaEnd takes an XA COMMIT or XA ROLLBACK group: the held rows of its xid go to the lanes now,
// after everything committed before, or are dropped.
func (p *Pipeline) xaEnd(ctx context.Context, t *binlog.Txn, items []item, size int) (bool, error) {
	xid := t.XA.XID
	p.xa.mu.Lock()
	h := p.xa.prepared[xid]
	p.xa.mu.Unlock()
	if h == nil {
		if t.XA.Op == binlog.XACommit {
			return false, &XAUnknownError{XID: xid, CommitGTID: t.GTID, Start: p.cfg.Start.String()}
		}
		// Nothing of a rolled-back XA is ever sent, wherever its prepare lies.
		p.cfg.Logger.Info().Str("gtid", t.GTID).Stringer("xid", xid).
			Msg("XA ROLLBACK of an XA transaction prepared before the start position: nothing to send")
	}
	// The XA COMMIT/ROLLBACK group carries no rows in either server's layout; any it had would be
	// committed with it.
	if err := p.tracker.admit(ctx, len(items), size); err != nil {
		return true, nil
	}
	c := p.tracker.begin(t.GTID, t.CommitTime, p.cfg.Now())
	p.tracker.extend(c, items)
	if h != nil && t.XA.Op == binlog.XACommit {
		p.tracker.pair(h.entry, c) // before either can be folded
	}
	if h != nil {
		p.xa.mu.Lock()
		delete(p.xa.prepared, xid)
		p.xa.mu.Unlock()
		if t.XA.Op == binlog.XACommit {
			p.tracker.unhold(h.events, h.bytes)
			p.hand(h.items, h.entry)
		} else {
			p.tracker.discard(h.entry, h.events, h.bytes)
		}
		p.tracker.finish(h.entry, h.file, h.pos)
		p.cfg.Logger.Debug().Str("gtid", t.GTID).Str("prepare_gtid", h.gtid).Stringer("xid", xid).
			Int("events", h.events).Str("step", t.XA.Op.String()).Msg("XA transaction ended")
	}
	p.hand(items, c)
	p.tracker.finish(c, t.File, t.Pos)
	return false, nil
}

func (p *Pipeline) xaCount() int {
	p.xa.mu.Lock()
	defer p.xa.mu.Unlock()
	return len(p.xa.prepared)
}

// admitHeld reserves capacity for n events of size bytes that are held until a later XA COMMIT.
// It waits while other events in flight fill the pipeline (their acknowledgements free it), and
// fails with *XACapacityError when the held events alone would exceed it. It returns ctx's error
// if ctx ends first, or errClosed after close.
func (t *tracker) admitHeld(ctx context.Context, gtid string, n, size, prepared int) error {
	t.mu.Lock()
	held, heldBytes := t.heldEvents+n, t.heldBytes+size
	t.mu.Unlock()
	if held > t.maxEvents || heldBytes > t.maxBytes {
		return &XACapacityError{GTID: gtid, HeldEvents: held, HeldBytes: heldBytes, MaxEvents: t.maxEvents,
			MaxBytes: t.maxBytes, PreparedTransactions: prepared, Piece: n}
	}
	if n == 0 {
		return nil
	}
	// The held events fit on their own (checked above), so the events that do not fit now are
	// in lanes, and their acknowledgements will make room.
	return t.reserve(ctx, n, size, true)
}

// unhold marks held events as handed to lanes: they stay in flight until acknowledged.
func (t *tracker) unhold(n, size int) {
	t.mu.Lock()
	t.heldEvents -= n
	t.heldBytes -= size
	t.mu.Unlock()
}

// discard drops held events of e that will never be sent (XA ROLLBACK) and frees their capacity.
func (t *tracker) discard(e *entry, n, size int) {
	t.mu.Lock()
	e.pending -= n
	if e.pending == 0 {
		e.first = firstItem{} // as ack does: an entry with nothing pending keeps no row alive
	}
	t.events -= n
	t.bytes -= size
	t.heldEvents -= n
	t.heldBytes -= size
	t.space.Broadcast()
	t.mu.Unlock()
}

// The XA gauges of package metrics read PreparedXA.
var _ metrics.PreparedXA = (*Pipeline)(nil)
