package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// entry is one transaction in flight: how many of its events are not yet acknowledged, and
// whether its last piece has arrived.
type entry struct {
	gtid       string
	commitTime time.Time
	readAt     time.Time // when its first piece entered the pipeline
	file       string
	pos        uint32
	pending    int
	final      bool
	// done is set when the entry left the tracker (acknowledged and folded into the set).
	done bool
	// merged holds the GTIDs of the complete entries compact folded into this one (its own
	// included); nil for an entry that stands for its own transaction only.
	merged *gtid.Set
	folded int // transactions folded into this entry besides its own
	// first is the first item of its latest piece while any of its events is unacknowledged,
	// for /status (oldestEvent). Pointers into what the items hold already, so the hot path
	// allocates nothing for it; cleared when pending reaches 0, so a complete entry waiting
	// behind the head never keeps its rows alive.
	first firstItem

	// For the latency histograms (latency.go). precise: commitTime has sub-second precision
	// (binlog.Txn.CommitTimePrecise). acks counts its events acknowledged; 0 at completion
	// means nothing of it was sent (no outbox rows, or a rolled-back XA): nothing to observe.
	precise bool
	acks    int
	// own marks outboxd's own checkpoint save read back (own.go): folding it is no reason to save.
	own bool
	// seq is the transaction's number in this tracker (0, 1, ... in queue order): it is folded
	// into acked once ackedTxns exceeds it, which is how cleanup knows a saved checkpoint covers
	// a row (cleanup.go).
	seq uint64

	// opens counts the XA PREPAREs this entry stands for whose XA COMMIT comes later in the
	// queue, closes the XA COMMITs of earlier XA PREPAREs (pair): the checkpoint must never
	// hold a prepare without its commit.
	opens, closes int
}

// firstItem names the event /status reports: the row and its message, as the items have them.
type firstItem struct {
	ev   *binlog.Event
	msg  *sink.Message
	sink string
}

// tracker orders the transactions in flight and holds the capacity that is the pipeline's
// backpressure. Safe for concurrent use: lanes acknowledge from their own goroutines.
type tracker struct {
	mu        sync.Mutex
	space     *sync.Cond // signalled when capacity frees up or the tracker closes
	maxEvents int
	maxBytes  int
	events    int // unacknowledged events held
	bytes     int // and their size
	closed    bool
	// heldEvents and heldBytes are the part of events and bytes that prepared XA transactions
	// hold until their XA COMMIT (xa.go): no acknowledgement frees them before that.
	heldEvents, heldBytes int

	queue []*entry // in binlog order; queue[0] is the oldest transaction not yet checkpointable
	// compactAt is the queue length at which advance next compacts it.
	compactAt int

	// acked is the executed set through the newest transaction whose events, and all earlier
	// transactions' events, were acknowledged. Only this set is ever checkpointed.
	acked     gtid.Set
	ackedFile string
	ackedPos  uint32
	ackedTime time.Time
	version   uint64 // bumped whenever acked moves over more than outboxd's own checkpoint saves
	ackedTxns uint64 // transactions folded into acked
	begun     uint64 // entries begun: the next entry's seq
	err       error  // a GTID the set could not take; ends the run

	// xaOpen counts the XA PREPAREs folded whose XA COMMIT is not folded yet. While it is not 0,
	// folded transactions go to ahead instead of acked: a checkpoint between an XA PREPARE and
	// its XA COMMIT would make the next start read the commit without the prepare's rows
	// (XAUnknownError), so acked takes them all at once when the commit is folded too.
	xaOpen int
	ahead  *aheadSet

	// observe, when set, is called (holding mu) once per transaction whose last event was
	// acknowledged (latency.go).
	observe func(e *entry)
}

func newTracker(start gtid.Set, maxEvents, maxBytes int) *tracker {
	t := &tracker{maxEvents: maxEvents, maxBytes: maxBytes, acked: start.Clone(), compactAt: minCompact}
	t.space = sync.NewCond(&t.mu)
	return t
}

// admit reserves capacity for a piece of n events and size bytes, blocking while the pipeline
// is full. A piece larger than the whole capacity is admitted when nothing else is in flight
// (or only held XA rows, see xa.go), so a huge transaction still moves, one piece at a time. It
// returns ctx's error if ctx ends first, or errClosed after close.
func (t *tracker) admit(ctx context.Context, n, size int) error {
	if n == 0 {
		return nil
	}
	return t.reserve(ctx, n, size, false)
}

// reserve waits until n events of size bytes fit, then counts them in flight (and as held for
// held). Unless held, it also admits them when nothing is in flight that an acknowledgement
// could free: only held XA rows, which wait for a later XA COMMIT, so waiting would never end.
func (t *tracker) reserve(ctx context.Context, n, size int, held bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitLocked(ctx, func() bool {
		if t.closed || ctx.Err() != nil {
			return false
		}
		fits := t.events+n <= t.maxEvents && t.bytes+size <= t.maxBytes
		if !fits && (held || t.events != t.heldEvents) {
			return false
		}
		t.events += n
		t.bytes += size
		if held {
			t.heldEvents += n
			t.heldBytes += size
		}
		return true
	})
}

// waitLocked waits, holding mu, until ready (called holding mu) reports true; it returns
// errClosed after close, or ctx's error once ctx ends, whichever it sees first after a ready
// that reported false.
func (t *tracker) waitLocked(ctx context.Context, ready func() bool) error {
	// The wake-up on ctx's end is registered only once the caller has to wait: registering it
	// for every transaction cost an allocation and a lock of ctx per 1-row transaction.
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if ready() {
			return nil
		}
		if t.closed {
			return errClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t.sleep(ctx, &stop)
	}
}

// sleep waits, holding mu, for space to be signalled; the caller then checks its condition
// again. The first call only registers ctx's end as a signal (in *stop, which the caller calls
// when done) and returns at once: the state may have changed while mu was released.
func (t *tracker) sleep(ctx context.Context, stop *func() bool) {
	if *stop == nil {
		t.mu.Unlock()
		*stop = context.AfterFunc(ctx, func() {
			t.mu.Lock()
			t.space.Broadcast()
			t.mu.Unlock()
		})
		t.mu.Lock()
		return
	}
	t.space.Wait()
}

var errClosed = fmt.Errorf("pipeline stopped")

// begin adds a new transaction at the end of the queue; the caller adds its events with
// extend before they are sent.
func (t *tracker) begin(gtidStr string, commit, now time.Time) *entry {
	return t.beginAt(gtidStr, commit, false, now)
}

// beginAt is begin with the commit time's precision (binlog.Txn.CommitTimePrecise).
func (t *tracker) beginAt(gtidStr string, commit time.Time, precise bool, now time.Time) *entry {
	e := &entry{gtid: gtidStr, commitTime: commit, precise: precise, readAt: now}
	t.mu.Lock()
	e.seq = t.begun
	t.begun++
	t.queue = append(t.queue, e)
	t.mu.Unlock()
	return e
}

// beginWhole is begin, extend, markOwn (own) and finish of a transaction that arrived whole, under
// one lock instead of four: a 1-row catch-up paid them per event. Call before any of items can
// be acknowledged (before they are handed to lanes); items may be empty.
func (t *tracker) beginWhole(gtidStr string, commit time.Time, precise bool, now time.Time, items []item, own bool, file string, pos uint32) *entry {
	e := &entry{gtid: gtidStr, commitTime: commit, precise: precise, readAt: now, own: own,
		final: true, file: file, pos: pos, pending: len(items)}
	if len(items) > 0 {
		e.first = firstOf(items)
	}
	t.mu.Lock()
	e.seq = t.begun
	t.begun++
	t.queue = append(t.queue, e)
	t.finishedLocked(e)
	t.mu.Unlock()
	return e
}

// firstOf is the firstItem of a piece's items (not empty).
func firstOf(items []item) firstItem {
	return firstItem{ev: items[0].ev, msg: items[0].msg, sink: items[0].sink}
}

// extend counts items, a piece of e, as pending. Call before any of them can be acknowledged.
func (t *tracker) extend(e *entry, items []item) {
	t.mu.Lock()
	e.pending += len(items)
	if e.first.ev == nil && len(items) > 0 {
		e.first = firstOf(items)
	}
	t.mu.Unlock()
}

// finish records that e's last piece arrived, with the position after it.
func (t *tracker) finish(e *entry, file string, pos uint32) {
	t.mu.Lock()
	e.final = true
	e.file, e.pos = file, pos
	t.finishedLocked(e)
	t.mu.Unlock()
}

// finishedLocked is the end of finish for e, now final: acknowledged already if nothing of it
// is pending (its last events were acknowledged before its last piece was recorded), then the
// acknowledged prefix moves. Holding mu.
func (t *tracker) finishedLocked(e *entry) {
	if e.pending == 0 {
		t.acked1(e)
	}
	t.advance()
}

// ack records that the events of items were acknowledged by their broker, and frees their
// capacity.
func (t *tracker) ack(items []item) {
	t.mu.Lock()
	complete := false
	for i := range items {
		e := items[i].entry
		e.pending--
		e.acks++
		t.events--
		t.bytes -= items[i].size
		if e.pending == 0 {
			e.first = firstItem{}
			complete = true
			if e.final {
				t.acked1(e)
			}
		}
	}
	if complete {
		t.advance()
	}
	t.space.Broadcast()
	t.mu.Unlock()
}

// aheadSet collects the transactions folded while an XA PREPARE's XA COMMIT is not (xaOpen).
type aheadSet struct {
	set  gtid.Set
	file string
	pos  uint32
	time time.Time
	txns uint64
	// foreign: it holds more than outboxd's own checkpoint saves (own.go), so folding it is
	// worth a save.
	foreign bool
}

// pair records that end is the XA COMMIT of the XA PREPARE prepare, before either can be
// folded: the checkpoint then never holds one without the other.
func (t *tracker) pair(prepare, end *entry) {
	t.mu.Lock()
	prepare.opens++
	end.closes++
	t.mu.Unlock()
}

// advance folds every leading transaction that is complete and fully acknowledged into the
// acknowledged set. Holding mu.
func (t *tracker) advance() {
	n := 0
	for _, e := range t.queue {
		if !e.final || e.pending > 0 {
			break
		}
		t.fold(e)
		e.done = true
		n++
	}
	if n > 0 {
		clear(t.queue[:n])
		t.queue = t.queue[n:]
	}
	if len(t.queue) >= t.compactAt {
		t.compact()
	}
}

// fold adds the complete head e to acked, or to ahead while an XA PREPARE folded before waits
// for its XA COMMIT. Holding mu.
func (t *tracker) fold(e *entry) {
	if t.xaOpen == 0 && e.opens == 0 {
		if err := addEntry(&t.acked, e); err != nil && t.err == nil {
			t.err = err
		}
		if e.file != "" {
			t.ackedFile = e.file
		}
		t.ackedPos, t.ackedTime = e.pos, e.commitTime
		t.ackedTxns += 1 + uint64(e.folded)
		if !e.own {
			t.version++ // progress worth a save: more than outboxd's own checkpoint writes
		}
		return
	}
	if t.ahead == nil {
		t.ahead = &aheadSet{set: gtid.Empty(t.acked.Flavor())}
	}
	a := t.ahead
	if err := addEntry(&a.set, e); err != nil && t.err == nil {
		t.err = err
	}
	if e.file != "" {
		a.file = e.file
	}
	a.pos, a.time = e.pos, e.commitTime
	a.txns += 1 + uint64(e.folded)
	a.foreign = a.foreign || !e.own
	t.xaOpen += e.opens - e.closes
	if t.xaOpen > 0 {
		return
	}
	if err := t.acked.AddSet(a.set); err != nil && t.err == nil {
		t.err = fmt.Errorf("record acknowledged transactions up to %s: %w", e.gtid, err)
	}
	if a.file != "" {
		t.ackedFile = a.file
	}
	t.ackedPos, t.ackedTime = a.pos, a.time
	t.ackedTxns += a.txns
	if a.foreign {
		t.version++
	}
	t.ahead = nil
}

// close wakes and fails every admit waiting for capacity.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.space.Broadcast()
	t.mu.Unlock()
}

// snapshot returns the checkpoint of everything acknowledged so far and its version.
func (t *tracker) snapshot() (checkpoint.Checkpoint, uint64, error) {
	c, version, _, err := t.snapshotTxns()
	return c, version, err
}

// snapshotTxns is snapshot with the number of transactions the checkpoint covers (ackedTxns):
// every entry whose seq is below it.
func (t *tracker) snapshotTxns() (checkpoint.Checkpoint, uint64, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkpointLocked(), t.version, t.ackedTxns, t.err
}

// checkpointLocked is the checkpoint of acked. Holding mu.
func (t *tracker) checkpointLocked() checkpoint.Checkpoint {
	return checkpoint.Checkpoint{
		Flavor:     t.acked.Flavor(),
		GTIDSet:    t.acked.String(),
		File:       t.ackedFile,
		Pos:        t.ackedPos,
		CommitTime: t.ackedTime,
	}
}

// ackedSet returns a copy of the acknowledged set.
func (t *tracker) ackedSet() gtid.Set {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked.Clone()
}

// inFlight reports the unacknowledged events and bytes held.
func (t *tracker) inFlight() (events, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events, t.bytes
}

// oldest reports the commit and read times of the oldest transaction not yet checkpointable.
func (t *tracker) oldest() (commit, read time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) == 0 {
		return time.Time{}, time.Time{}, false
	}
	e := t.queue[0]
	return e.commitTime, e.readAt, true
}

// OldestEvent is the first event of the oldest transaction that has unacknowledged events:
// the row whose delivery holds the checkpoint. In a transaction of several events this event
// may be acknowledged itself while a later one of the same transaction is not.
type OldestEvent struct {
	// Table is schema.table; ID its id column as text ("" when it has none).
	Table, ID string
	// EventID is the event_id column; Topic and Sink the message's destination (the dead-letter
	// topic for a dead letter).
	EventID, Topic, Sink string
	GTID                 string
	CommitTime, ReadAt   time.Time
}

// oldestEvent finds the OldestEvent; ok is false when no event is unacknowledged. It walks
// the queue to the first entry with pending events (usually the head) and copies the strings,
// so it costs the /status read, not the hot path.
func (t *tracker) oldestEvent() (OldestEvent, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.queue {
		f := e.first
		if e.pending == 0 || f.ev == nil {
			continue
		}
		o := OldestEvent{
			Table: f.ev.Schema + "." + f.ev.Table, ID: f.ev.ID, EventID: string(f.ev.EventID.Bytes),
			Sink: f.sink, GTID: e.gtid, CommitTime: e.commitTime, ReadAt: e.readAt,
		}
		if f.msg != nil {
			o.Topic = f.msg.Topic
		}
		return o, true
	}
	return OldestEvent{}, false
}

// readSet returns the acknowledged set plus the GTIDs of every transaction in flight.
func (t *tracker) readSet() gtid.Set {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.acked.Clone()
	if t.ahead != nil {
		_ = s.AddSet(t.ahead.set)
	}
	for _, e := range t.queue {
		_ = addEntry(&s, e) // a GTID the set cannot take already failed the run in advance
	}
	return s
}

// ackedCount reports how many transactions were acknowledged.
func (t *tracker) ackedCount() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ackedTxns
}

// minCompact is the queue length below which the tracker is never compacted.
const minCompact = 1024

// complete reports whether e is acknowledged and its last piece arrived: nothing refers to it
// any more but the queue. Holding mu.
func (e *entry) complete() bool { return e.final && e.pending == 0 }

// addEntry adds the GTIDs e stands for to s.
func addEntry(s *gtid.Set, e *entry) error {
	if e.merged != nil {
		if err := s.AddSet(*e.merged); err != nil {
			return fmt.Errorf("record acknowledged transactions up to %s: %w", e.gtid, err)
		}
		return nil
	}
	if e.gtid == "" {
		return nil
	}
	if err := s.Add(e.gtid); err != nil {
		return fmt.Errorf("record acknowledged transaction %s: %w", e.gtid, err)
	}
	return nil
}

// compact folds each run of complete entries behind the head (which is not complete, or advance
// would have taken it) into the run's last entry, so that a head held for long — a prepared XA
// transaction waiting for its XA COMMIT — costs memory per run of acknowledged transactions, not
// per transaction. The folded entry keeps the run's GTIDs and the position and commit time of
// its last transaction, which is all advance needs. Amortised O(1) per transaction: the next
// compaction waits until the queue has doubled. Holding mu.
func (t *tracker) compact() {
	out := t.queue[:1]
	for _, e := range t.queue[1:] {
		last := out[len(out)-1]
		if len(out) == 1 || !last.complete() || !e.complete() {
			out = append(out, e)
			continue
		}
		if last.merged == nil {
			set := gtid.Empty(t.acked.Flavor())
			if err := addEntry(&set, last); err != nil {
				out = append(out, e) // a GTID the set cannot take fails the run when it is folded
				continue
			}
			last.merged = &set
		}
		if err := addEntry(last.merged, e); err != nil {
			out = append(out, e)
			continue
		}
		last.gtid, last.commitTime, last.pos = e.gtid, e.commitTime, e.pos
		last.folded += 1 + e.folded
		last.own = last.own && e.own
		last.opens += e.opens
		last.closes += e.closes
		if e.file != "" {
			last.file = e.file
		}
	}
	clear(t.queue[len(out):])
	t.queue = out
	t.compactAt = max(minCompact, 2*len(out))
}
