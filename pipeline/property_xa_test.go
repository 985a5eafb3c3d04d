package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

// xaWorkload is a random binlog: ordinary transactions (some in pieces, some empty) interleaved
// with XA transactions prepared (in pieces too), then committed or rolled back any number of
// transactions later, rows for topics that are missing for a while, and the model the checks
// compare with.
type xaWorkload struct {
	txns []*binlog.Txn // in binlog order; pieces share a GTID
	last int           // the last sequence number
	// order is each committed event's place in commit order (an XA's rows at its XA COMMIT).
	order map[string]int
	// rolledBack are the events of rolled-back XA transactions: never to be delivered.
	rolledBack map[string]bool
	// needs lists, per sequence number, the events a checkpoint covering it must have seen
	// acknowledged: a transaction's own, an XA COMMIT's prepared rows.
	needs map[int][]string
	// commitOf maps the sequence number of a committed XA PREPARE to its XA COMMIT's.
	commitOf map[int]int
}

func genXAWorkload(r *rand.Rand, nKeys, piece int, topics []string) *xaWorkload {
	w := &xaWorkload{order: map[string]int{}, rolledBack: map[string]bool{}, needs: map[int][]string{}, commitOf: map[int]int{}}
	type open struct {
		seq    int
		xid    string
		events []string
	}
	var prepared []open
	n, place, xids := 0, 0, 0
	newEvents := func(k int) ([]binlog.Event, []string) {
		var evs []binlog.Event
		var ids []string
		for range k {
			n++
			id := fmt.Sprintf("e%d", n)
			topic := "t"
			if r.IntN(8) == 0 {
				topic = topics[r.IntN(len(topics))]
			}
			evs = append(evs, binlog.Event{Schema: "s", Table: "o",
				EventID: binlog.Field{Bytes: []byte(id)}, Key: binlog.Field{Bytes: []byte(fmt.Sprintf("k%d", r.IntN(nKeys)))},
				Topic: binlog.Field{Bytes: []byte(topic)}, Payload: binlog.Field{Bytes: []byte(id)}})
			ids = append(ids, id)
		}
		return evs, ids
	}
	commit := func(ids []string) {
		for _, id := range ids {
			w.order[id] = place
			place++
		}
	}
	emit := func(g string, evs []binlog.Event, last *binlog.Txn) {
		for len(evs) > piece {
			t := &binlog.Txn{GTID: g, Events: evs[:piece], Partial: true}
			if last.XA != nil {
				t.XA = &binlog.XAStep{Op: binlog.XAPending}
			}
			w.txns = append(w.txns, t)
			evs = evs[piece:]
		}
		last.GTID, last.Events = g, evs
		w.txns = append(w.txns, last)
	}
	nTxns := 50 + r.IntN(200)
	for seq := 1; seq <= nTxns || len(prepared) > 0; seq++ {
		w.last = seq
		g := fmt.Sprintf("0-1-%d", seq)
		end := &binlog.Txn{File: "f", Pos: uint32(seq)}
		switch c := r.IntN(10); {
		case len(prepared) > 0 && (c < 2 || seq > nTxns):
			i := r.IntN(len(prepared))
			x := prepared[i]
			prepared = append(prepared[:i], prepared[i+1:]...)
			op := binlog.XACommit
			if r.IntN(3) == 0 {
				op = binlog.XARollback
				for _, id := range x.events {
					w.rolledBack[id] = true
				}
			} else {
				commit(x.events)
				w.needs[seq] = x.events
				w.commitOf[x.seq] = seq
			}
			end.XA = &binlog.XAStep{Op: op, XID: binlog.XID{FormatID: 1, Gtrid: x.xid}}
			emit(g, nil, end)
		case c < 4 && len(prepared) < 3:
			xids++
			xid := fmt.Sprintf("x%d", xids)
			evs, ids := newEvents(1 + r.IntN(4))
			prepared = append(prepared, open{seq: seq, xid: xid, events: ids})
			end.XA = &binlog.XAStep{Op: binlog.XAPrepare, XID: binlog.XID{FormatID: 1, Gtrid: xid}}
			emit(g, evs, end)
		case c == 4 && r.IntN(30) == 0:
			// A burst of transactions without outbox rows, most likely behind a prepared XA:
			// enough to make the tracker compact its queue (minCompact).
			for range minCompact + r.IntN(minCompact) {
				emit(g, nil, end)
				seq++
				w.last = seq
				g = fmt.Sprintf("0-1-%d", seq)
				end = &binlog.Txn{File: "f", Pos: uint32(seq)}
			}
			emit(g, nil, end)
		default:
			size := r.IntN(6)
			if r.IntN(20) == 0 {
				size = 20 + r.IntN(60)
			}
			evs, ids := newEvents(size)
			commit(ids)
			w.needs[seq] = ids
			emit(g, evs, end)
		}
	}
	return w
}

// xaCheckingSaver checks each checkpoint it is given against the model, and fails at random.
type xaCheckingSaver struct {
	t        *testing.T
	sink     *chaosSink
	w        *xaWorkload
	rng      *lockedRand
	failRate atomic.Value // float64
	mu       sync.Mutex
	last     int
	saves    int
	failures int
}

func (s *xaCheckingSaver) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rng.float() < s.failRate.Load().(float64) {
		s.failures++
		return errors.New("injected save failure")
	}
	seq, ok := s.sink.checkCovered(s.t, c, s.last, s.w.needs)
	if !ok {
		return nil
	}
	for q := 1; q <= seq; q++ {
		if cm, ok := s.w.commitOf[q]; ok && cm > seq {
			s.t.Errorf("checkpoint %s lies between XA PREPARE 0-1-%d and its XA COMMIT 0-1-%d", c.GTIDSet, q, cm)
		}
	}
	s.last = seq
	s.saves++
	return nil
}

// TestPropertyXAMissingTopicsSavesAndRestart extends the property test to the day's additions:
// random XA PREPARE / COMMIT / ROLLBACK interleaved with ordinary transactions (both in pieces),
// topics missing for a random while (then created), saves failing at random, acknowledgements
// of parts of batches, and a stop at a random point followed by a restart from the checkpoint
// saved. It checks: every committed event is delivered and no rolled-back one; per key, first
// deliveries follow commit order (an XA's rows at its XA COMMIT) across the restart; every
// checkpoint covers only acknowledged transactions and never lies between an XA PREPARE and
// its XA COMMIT; the restart never meets an XA COMMIT without its prepare; and the final
// checkpoint is the last transaction.
func TestPropertyXAMissingTopicsSavesAndRestart(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	if v, err := strconv.Atoi(os.Getenv("OUTBOXD_PROPERTY_SEEDS")); err == nil {
		seeds = v
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runXAProperty(t, uint64(seed)) })
	}
}

func runXAProperty(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 2026))
	nKeys := 1 + r.IntN(30)
	piece := 1 + r.IntN(10)
	topics := []string{"late0", "late1"}
	w := genXAWorkload(r, nKeys, piece, topics)
	// A topic is missing until a random moment after the test starts.
	began := time.Now()
	appear := map[string]time.Duration{}
	for _, tp := range topics {
		appear[tp] = time.Duration(r.IntN(80)) * time.Millisecond
	}
	cs := &chaosSink{rng: &lockedRand{r: rand.New(rand.NewPCG(seed, 7))}, failRate: []float64{0, 0.05, 0.3}[r.IntN(3)],
		maxDelay: time.Duration(r.IntN(3)) * time.Millisecond, storedIDs: map[string]bool{},
		missing: func(topic string) bool { d, ok := appear[topic]; return ok && time.Since(began) < d }}
	saver := &xaCheckingSaver{t: t, sink: cs, w: w, rng: &lockedRand{r: rand.New(rand.NewPCG(seed, 11))}}
	saveFail := []float64{0, 0.2, 0.5}[r.IntN(3)]
	saver.failRate.Store(saveFail)
	maxEvents := 12 + r.IntN(150) // at least what three prepared XAs of four rows hold
	lanes, batch := 1+r.IntN(8), 1+r.IntN(30)
	stopAt := r.IntN(len(w.txns) + 1) // Txn values the first run takes before its stop

	newP := func(start gtid.Set) *Pipeline {
		p, err := New(Config{
			Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": cs}, Saver: saver, Start: start,
			RetryInitial: 100 * time.Microsecond, RetryMax: time.Millisecond, CheckpointInterval: time.Millisecond,
			MaxInflightEvents: maxEvents, MaxInflightBytes: 1 << 30, Lanes: lanes, MaxBatchEvents: batch,
			DrainTimeout: 20 * time.Millisecond, SaveFailureLimit: time.Minute, MissingTopicWait: time.Minute,
			Logger: zerolog.Nop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		cs.p.Store(p)
		return p
	}
	run := func(p *Pipeline, txns []*binlog.Txn, stop bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runCtx, stopRun := context.WithCancel(ctx)
		defer stopRun()
		in := make(chan *binlog.Txn)
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx, in) }()
		for _, x := range txns {
			select {
			case in <- x:
			case err := <-done:
				t.Fatalf("pipeline stopped before %s: %v", x.GTID, err)
			}
		}
		if stop {
			stopRun()
		} else {
			saver.failRate.Store(0.0) // the final save must land for the checks below
			close(in)
		}
		return <-done
	}

	// First run: stopped after stopAt Txn values, as by SIGTERM.
	if err := run(newP(gtid.Empty(gtid.MariaDB)), w.txns[:stopAt], true); err != nil && !errors.Is(err, ErrCheckpointSave) {
		t.Fatalf("first run: %v", err)
	}
	saver.mu.Lock()
	resume := saver.last
	saver.mu.Unlock()
	start := gtid.Empty(gtid.MariaDB)
	if resume > 0 {
		start = mustParse(t, fmt.Sprintf("0-1-%d", resume))
	}
	// Second run: from the checkpoint, the binlog after it, to the end.
	var rest []*binlog.Txn
	for _, x := range w.txns {
		if seqOf(t, x.GTID) > resume {
			rest = append(rest, x)
		}
	}
	p := newP(start)
	if err := run(p, rest, false); err != nil {
		t.Fatalf("restart from checkpoint 0-1-%d (first run stopped after %d of %d Txn values): %v", resume, stopAt, len(w.txns), err)
	}

	for _, m := range cs.stored {
		if w.rolledBack[m.EventID] {
			t.Fatalf("event %s of a rolled-back XA was delivered", m.EventID)
		}
	}
	if n := checkFirstDeliveryOrder(t, cs.stored, w.order); n != len(w.order) {
		t.Fatalf("%d of %d committed events delivered", n, len(w.order))
	}
	want := fmt.Sprintf("0-1-%d", w.last)
	if got := p.Acked().String(); got != want {
		t.Fatalf("acknowledged set %s, want %s", got, want)
	}
	if saver.last != w.last {
		t.Fatalf("last checkpoint 0-1-%d, want %s", saver.last, want)
	}
	if n, _ := p.PreparedXA(); n != 0 {
		t.Fatalf("%d XA still prepared", n)
	}
	if ev, b := p.InFlight(); ev != 0 || b != 0 {
		t.Fatalf("%d events, %d bytes still in flight", ev, b)
	}
	t.Logf("%d Txn values to 0-1-%d, %d committed events, %d rolled back, %d keys, piece %d, capacity %d, lanes %d; "+
		"stop after %d, resumed from 0-1-%d; %d sends, %d injected send failures (%d for missing topics), %d saves, %d failed saves (rate %.1f)",
		len(w.txns), w.last, len(w.order), len(w.rolledBack), nKeys, piece, maxEvents, lanes,
		stopAt, resume, cs.sends, cs.failures, cs.missed, saver.saves, saver.failures, saveFail)
}

func seqOf(t *testing.T, g string) int {
	v, err := strconv.Atoi(g[strings.LastIndexByte(g, '-')+1:])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustParse(t *testing.T, s string) gtid.Set {
	set, err := gtid.Parse(gtid.MariaDB, s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
