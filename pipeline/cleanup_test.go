package pipeline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// recCleanup records what the pipeline hands to cleanup and checks, at every Saved, the rule
// cleanup relies on: every row of a transaction the save covers was handed over before it
// when delivered, and no dead-lettered row ever is.
type recCleanup struct {
	t         *testing.T
	mu        sync.Mutex
	delivered map[string]uint64 // event id -> seq
	saved     []uint64
	// wantBySeq are the event ids of each transaction (by seq) and whether each is dead.
	wantBySeq map[uint64]map[string]bool
	// saver, when set, is checked at every Saved(n): the checkpoint just saved is exactly
	// transactions 0-1-1 .. 0-1-n (seq 0 .. n-1), no more, so a key released by n is of a
	// transaction in it.
	saver *memSaver
}

func (r *recCleanup) Delivered(rows []Row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range rows {
		id := string(x.Event.EventID.Bytes)
		if _, dup := r.delivered[id]; dup {
			r.t.Errorf("event %s handed over twice", id)
		}
		r.delivered[id] = x.Seq
	}
}

func (r *recCleanup) Saved(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := len(r.saved); k > 0 && n < r.saved[k-1] {
		r.t.Errorf("Saved went back from %d to %d", r.saved[k-1], n)
	}
	r.saved = append(r.saved, n)
	if r.saver != nil && n > 0 {
		if got, want := r.saver.last(), fmt.Sprintf("0-1-%d", n); got != want {
			r.t.Errorf("Saved(%d) after saving %s, want %s: n and the saved checkpoint disagree", n, got, want)
		}
	}
	for seq := uint64(0); seq < n; seq++ {
		for id, dead := range r.wantBySeq[seq] {
			got, ok := r.delivered[id]
			if dead {
				if ok {
					r.t.Errorf("dead-lettered event %s handed over as delivered", id)
				}
				continue
			}
			if !ok || got != seq {
				r.t.Errorf("save covering %d transactions: event %s of transaction %d not handed over (dead %v, got seq %d, %v)", n, id, seq, dead, got, ok)
			}
		}
	}
}

func newRecCleanup(t *testing.T) *recCleanup {
	return &recCleanup{t: t, delivered: map[string]uint64{}, wantBySeq: map[uint64]map[string]bool{}}
}

// A randomized run: transient failures, permanent rejections (dead-lettered) and unroutable
// rows (dead letters from the start), several rows per transaction, empty transactions.
func TestCleanupHandOverCoversEverySave(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCleanupHandOver(t, seed) })
	}
}

func runCleanupHandOver(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	var rndMu sync.Mutex
	s := &memSink{fail: func(m *sink.Message, attempt int) error {
		rndMu.Lock()
		defer rndMu.Unlock()
		switch {
		case m.Topic == "reject":
			return sink.Permanent(errors.New("too large"))
		case attempt < 3 && rnd.IntN(4) == 0:
			return errors.New("broker busy")
		}
		return nil
	}}
	cl := newRecCleanup(t)
	cl.saver = &memSaver{}
	p, err := New(Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": s}, Saver: cl.saver,
		Start: gtid.Empty(gtid.MariaDB), OnPoison: PoisonDeadLetter,
		RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond,
		CheckpointInterval: time.Millisecond, Logger: zerolog.Nop(), Cleanup: cl, Lanes: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	var txns []*binlog.Txn
	n := 0
	for i := range 300 {
		var evs []string
		want := map[string]bool{}
		for range rnd.IntN(4) {
			n++
			topic, dead := "t", false
			switch rnd.IntN(10) {
			case 0:
				topic, dead = "nowhere", true
			case 1:
				topic, dead = "reject", true
			}
			id := fmt.Sprint(n)
			key := fmt.Sprintf("k%d", rnd.IntN(8))
			if dead {
				key = "x" + id // memSink fails a rejected row's same-key followers in the send too
			}
			evs = append(evs, fmt.Sprintf("%s:%s@%s", key, id, topic))
			want[id] = dead
		}
		cl.wantBySeq[uint64(i)] = want
		txns = append(txns, txn(i+1, evs...))
	}
	if err := runAll(t, p, txns...); err != nil {
		t.Fatal(err)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.saved) == 0 || cl.saved[len(cl.saved)-1] != 300 {
		t.Fatalf("saves %v, want the last to cover all 300 transactions", cl.saved)
	}
	dead := 0
	for _, want := range cl.wantBySeq {
		for _, d := range want {
			if d {
				dead++
			}
		}
	}
	if len(cl.delivered) != n-dead {
		t.Fatalf("handed over %d delivered of %d rows (%d dead-lettered)", len(cl.delivered), n, dead)
	}
}
