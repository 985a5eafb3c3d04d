package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// chaosSink acknowledges after a random delay and fails random messages transiently (a failed
// message fails its same-key followers in the call, as the Sink contract says). It records
// every stored message and, on each Send, the pipeline's in-flight count.
type chaosSink struct {
	rng      *lockedRand
	failRate float64
	maxDelay time.Duration
	// missing, when set, says whether a topic does not exist (yet): its messages fail with a
	// topic-missing error.
	missing func(topic string) bool
	p       atomic.Pointer[Pipeline]

	mu          sync.Mutex
	stored      []*sink.Message
	storedIDs   map[string]bool
	maxInFlight int
	sends       int
	failures    int
	missed      int // failures for a missing topic
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) float() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) intN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (c *chaosSink) Send(ctx context.Context, msgs []*sink.Message) error {
	if p := c.p.Load(); p != nil {
		n, _ := p.InFlight()
		c.mu.Lock()
		c.maxInFlight = max(c.maxInFlight, n)
		c.mu.Unlock()
	}
	if c.maxDelay > 0 {
		select {
		case <-time.After(time.Duration(c.rng.intN(int(c.maxDelay)))):
		case <-ctx.Done():
			return sink.AllFailed(len(msgs), ctx.Err())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sends++
	var se sink.SendError
	failed := map[string]bool{}
	for i, m := range msgs {
		if !failed[string(m.Key)] && c.missing != nil && c.missing(m.Topic) {
			failed[string(m.Key)] = true
			se.Failures = append(se.Failures, sink.Failure{Index: i, Err: sink.TopicMissing(errors.New("injected: topic " + m.Topic + " does not exist"))})
			c.failures++
			c.missed++
			continue
		}
		if failed[string(m.Key)] || c.rng.float() < c.failRate {
			failed[string(m.Key)] = true
			se.Failures = append(se.Failures, sink.Failure{Index: i, Err: errors.New("injected transient failure")})
			c.failures++
			continue
		}
		c.stored = append(c.stored, m)
		c.storedIDs[m.EventID] = true
	}
	if len(se.Failures) > 0 {
		return &se
	}
	return nil
}

func (c *chaosSink) Close() error { return nil }

// checkingSaver verifies, at every save, that each transaction the checkpoint covers had all
// of its events stored: the checkpoint has no gaps below it.
type checkingSaver struct {
	t      *testing.T
	sink   *chaosSink
	txnIDs map[int][]string // seq -> event ids
	mu     sync.Mutex
	saves  int
	last   int
}

func (s *checkingSaver) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq, ok := s.sink.checkCovered(s.t, c, s.last, s.txnIDs); ok {
		s.last = seq
		s.saves++
	}
	return nil
}

// checkFirstDeliveryOrder checks that, per key, the first delivery of each event in stored
// follows order, the events' places in commit order. It returns how many distinct events
// were stored.
func checkFirstDeliveryOrder(t *testing.T, stored []*sink.Message, order map[string]int) int {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, m := range stored {
		if seen[m.EventID] {
			continue
		}
		seen[m.EventID] = true
		k, at := string(m.Key), order[m.EventID]
		if l, ok := last[k]; ok && l > at {
			t.Fatalf("key %s: %s (commit #%d) first delivered after commit #%d", k, m.EventID, at, l)
		}
		last[k] = at
	}
	return len(seen)
}

// checkCovered checks checkpoint c of a workload whose GTIDs are 0-1-<seq> against last, the
// sequence number of the checkpoint before it: c must not go back, and every transaction it
// newly covers must have had all its events, needs[q], stored by cs. It returns c's sequence
// number (0 for the empty set); ok is false when c does not parse.
func (cs *chaosSink) checkCovered(t *testing.T, c checkpoint.Checkpoint, last int, needs map[int][]string) (seq int, ok bool) {
	if c.GTIDSet != "" {
		v, err := strconv.Atoi(c.GTIDSet[strings.LastIndexByte(c.GTIDSet, '-')+1:])
		if err != nil {
			t.Errorf("checkpoint %q: %v", c.GTIDSet, err)
			return 0, false
		}
		seq = v
	}
	if seq < last {
		t.Errorf("checkpoint went backwards from %d to %d", last, seq)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for q := last + 1; q <= seq; q++ {
		for _, id := range needs[q] {
			if !cs.storedIDs[id] {
				t.Errorf("checkpoint %s covers transaction %d, but its event %s was never acknowledged", c.GTIDSet, q, id)
			}
		}
	}
	return seq, true
}

// TestPropertyOrderAndGapFreeCheckpoint runs random workloads — transactions of random sizes,
// some split into pieces, few and many keys, random ack delays and transient failures, small
// and large capacities, lanes and batches — and checks the engine's invariants: every event is
// stored, each key's first deliveries come in commit order, every checkpoint covers only
// transactions whose events were all acknowledged, and the events in flight never exceed the
// capacity (beyond one oversized piece).
func TestPropertyOrderAndGapFreeCheckpoint(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runProperty(t, uint64(seed))
		})
	}
}

func runProperty(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	nTxns := 50 + r.IntN(250)
	nKeys := 1 + r.IntN(40)
	piece := 1 + r.IntN(20)
	maxEvents := 1 + r.IntN(200)
	var txns []*binlog.Txn
	txnIDs := map[int][]string{}
	var committed []string
	keyOf := map[string]string{}
	n := 0
	for i := 1; i <= nTxns; i++ {
		size := r.IntN(6)
		if r.IntN(20) == 0 {
			size = 30 + r.IntN(100) // a large transaction, split into pieces
		}
		var events []binlog.Event
		for range size {
			n++
			id := fmt.Sprintf("e%d", n)
			key := fmt.Sprintf("k%d", r.IntN(nKeys))
			keyOf[id] = key
			committed = append(committed, id)
			txnIDs[i] = append(txnIDs[i], id)
			events = append(events, binlog.Event{Schema: "s", Table: "o",
				EventID: binlog.Field{Bytes: []byte(id)}, Key: binlog.Field{Bytes: []byte(key)},
				Topic: binlog.Field{Bytes: []byte("t")}, Payload: binlog.Field{Bytes: []byte(id)}})
		}
		g := fmt.Sprintf("0-1-%d", i)
		for len(events) > piece {
			txns = append(txns, &binlog.Txn{GTID: g, Events: events[:piece], Partial: true})
			events = events[piece:]
		}
		txns = append(txns, &binlog.Txn{GTID: g, Events: events, File: "f", Pos: uint32(i)})
	}

	cs := &chaosSink{rng: &lockedRand{r: rand.New(rand.NewPCG(seed, 7))}, failRate: []float64{0, 0.05, 0.3}[r.IntN(3)],
		maxDelay: time.Duration(r.IntN(3)) * time.Millisecond, storedIDs: map[string]bool{}}
	saver := &checkingSaver{t: t, sink: cs, txnIDs: txnIDs}
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": cs}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), RetryInitial: 100 * time.Microsecond, RetryMax: time.Millisecond,
		CheckpointInterval: time.Millisecond, MaxInflightEvents: maxEvents, MaxInflightBytes: 1 << 30,
		Lanes: 1 + r.IntN(8), MaxBatchEvents: 1 + r.IntN(50), Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cs.p.Store(p)
	in := make(chan *binlog.Txn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	for _, x := range txns {
		select {
		case in <- x:
		case <-ctx.Done():
			t.Fatal("pipeline stopped taking transactions")
		}
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Every event stored; per key, first deliveries in commit order.
	pos := map[string]int{}
	for i, id := range committed {
		pos[id] = i
	}
	if n := checkFirstDeliveryOrder(t, cs.stored, pos); n != len(committed) {
		t.Fatalf("%d of %d events stored", n, len(committed))
	}
	if got := p.Acked().String(); got != fmt.Sprintf("0-1-%d", nTxns) {
		t.Fatalf("acknowledged set %s, want 0-1-%d", got, nTxns)
	}
	if saver.last != nTxns {
		t.Fatalf("last checkpoint %d, want %d", saver.last, nTxns)
	}
	// Capacity: never more in flight than allowed, except one piece admitted alone.
	if limit := max(maxEvents, piece); cs.maxInFlight > limit {
		t.Fatalf("%d events in flight, capacity %d (piece %d)", cs.maxInFlight, maxEvents, piece)
	}
	t.Logf("%d txns, %d events, %d keys, piece %d, capacity %d: %d sends, %d injected failures, max in flight %d, %d saves",
		nTxns, len(committed), nKeys, piece, maxEvents, cs.sends, cs.failures, cs.maxInFlight, saver.saves)
}

// Backpressure: while the sink holds every send, the pipeline takes no more transactions than
// its capacity allows, and so the reader (here, the channel) blocks.
func TestBackpressureBoundsWhatIsRead(t *testing.T) {
	s := &memSink{block: make(chan struct{})}
	saver := &memSaver{}
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: saver,
		Start: gtid.Empty(gtid.MariaDB), MaxInflightEvents: 10, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *binlog.Txn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	taken := 0
	for i := 1; i <= 100; i++ {
		select {
		case in <- txn(i, fmt.Sprintf("k%d:%d", i, i), fmt.Sprintf("k%d:%db", i, i)):
			taken++
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	// 10 events fit: 5 transactions of 2, plus the one the dispatcher holds waiting for room.
	if taken != 6 {
		t.Fatalf("pipeline took %d transactions of 2 events with a capacity of 10 events", taken)
	}
	if ev, _ := p.InFlight(); ev != 10 {
		t.Fatalf("%d events in flight, want 10", ev)
	}
	close(s.block)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
