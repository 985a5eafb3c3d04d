package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// txnBroker is a fake transactional producer, the sink and the Committer of exactly-once mode:
// the messages memSink stores join the open transaction (stored[from:]); Save commits them with
// the checkpoint and records what the commit covered; Abort drops them.
type txnBroker struct {
	memSink
	rng      *lockedRand       // nil: no delay
	maxDelay time.Duration     // random delay per Send
	saveErr  func(n int) error // error for the n-th Save (from 1); nil: every Save commits

	from    int // stored[from:] is the open transaction; guarded by memSink.mu
	commits []txnCommit
	saves   int
	aborts  int
}

type txnCommit struct {
	c    checkpoint.Checkpoint
	msgs []*sink.Message
}

func (b *txnBroker) Send(ctx context.Context, msgs []*sink.Message) error {
	if b.rng != nil && b.maxDelay > 0 {
		time.Sleep(time.Duration(b.rng.intN(int(b.maxDelay))))
	}
	return b.memSink.Send(ctx, msgs)
}

func (b *txnBroker) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.saves++
	if b.saveErr != nil {
		if err := b.saveErr(b.saves); err != nil {
			return err
		}
	}
	b.commits = append(b.commits, txnCommit{c: c, msgs: b.stored[b.from:]})
	b.from = len(b.stored)
	return nil
}

func (b *txnBroker) Abort(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.aborts++
	b.stored = b.stored[:b.from:b.from]
	return nil
}

// failOn fails every attempt of the messages fail picks.
func failOn(fail func(m *sink.Message) error) func(*sink.Message, int) error {
	return func(m *sink.Message, _ int) error { return fail(m) }
}

func (b *txnBroker) snapshot() (commits []txnCommit, saves, aborts int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]txnCommit(nil), b.commits...), b.saves, b.aborts
}

// waitCommits waits until at least n commits were made.
func (b *txnBroker) waitCommits(t *testing.T, n int) []txnCommit {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		commits, _, _ := b.snapshot()
		if len(commits) >= n {
			return commits
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commits, want %d", len(commits), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// setSeq is the sequence number of a 0-1-<seq> checkpoint (0 for the empty set).
func setSeq(t *testing.T, set string) int {
	t.Helper()
	if set == "" {
		return 0
	}
	return seqOf(t, set)
}

func commitIDs(c txnCommit) string {
	ids := make([]string, len(c.msgs))
	for i, m := range c.msgs {
		ids[i] = m.Topic + "/" + m.EventID
	}
	return strings.Join(ids, " ")
}

func newTxnPipeline(t *testing.T, b *txnBroker, lim Transactions, tweak func(*Config)) *Pipeline {
	t.Helper()
	cfg := Config{
		Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": b}, Saver: b,
		Start: gtid.Empty(gtid.MariaDB), RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		DrainTimeout: 5 * time.Second, Transactions: &lim, Logger: zerolog.Nop(),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTxnNeedsACommitter(t *testing.T) {
	_, err := New(Config{Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": &memSink{}}, Saver: &memSaver{},
		Start: gtid.Empty(gtid.MariaDB), Transactions: &Transactions{}})
	if err == nil || !strings.Contains(err.Error(), "Committer") {
		t.Fatalf("New = %v, want a refusal of a Saver that cannot commit", err)
	}
}

// TestTxnPropertyCommitsCoverExactlyWhatWasSent runs random workloads — transactions of random
// sizes, some split into pieces, few and many keys, lanes, batches, capacities, limits and input
// buffering — and checks the exactly-once rule: each commit's checkpoint covers exactly the
// source transactions whose events the commit holds (nothing more, nothing less, never part of
// one), every event is committed once, per key in commit order, and a commit reaches a limit
// only with its last source transaction.
func TestTxnPropertyCommitsCoverExactlyWhatWasSent(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runTxnProperty(t, uint64(seed)) })
	}
}

func runTxnProperty(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 24))
	nTxns := 50 + r.IntN(250)
	nKeys := 1 + r.IntN(40)
	piece := 1 + r.IntN(20)
	seqOfID := map[string]int{}
	needs := map[int][]string{}
	var committed []string
	var txns []*binlog.Txn
	n := 0
	for i := 1; i <= nTxns; i++ {
		size := r.IntN(6)
		if r.IntN(20) == 0 {
			size = 30 + r.IntN(100)
		}
		var events []binlog.Event
		for range size {
			n++
			id := fmt.Sprintf("e%d", n)
			seqOfID[id] = i
			needs[i] = append(needs[i], id)
			committed = append(committed, id)
			events = append(events, binlog.Event{Schema: "s", Table: "o",
				EventID: binlog.Field{Bytes: []byte(id)}, Key: binlog.Field{Bytes: []byte(fmt.Sprintf("k%d", r.IntN(nKeys)))},
				Topic: binlog.Field{Bytes: []byte("t")}, Payload: binlog.Field{Bytes: []byte(id)}})
		}
		g := fmt.Sprintf("0-1-%d", i)
		for len(events) > piece {
			txns = append(txns, &binlog.Txn{GTID: g, Events: events[:piece], Partial: true})
			events = events[piece:]
		}
		txns = append(txns, &binlog.Txn{GTID: g, Events: events, File: "f", Pos: uint32(i)})
	}
	lim := Transactions{MaxEvents: 1 + r.IntN(300), MaxBytes: []int{1 << 30, 100 + r.IntN(2000)}[r.IntN(2)],
		MaxAge: []time.Duration{time.Hour, time.Millisecond}[r.IntN(2)]}
	b := &txnBroker{rng: &lockedRand{r: rand.New(rand.NewPCG(seed, 8))}, maxDelay: time.Duration(r.IntN(2)) * time.Millisecond}
	// A third of the runs have one send fail: the run must abort there, the commits before it
	// still exact.
	failID := ""
	if n > 0 && r.IntN(3) == 0 {
		failID = committed[r.IntN(len(committed))]
		b.fail = func(m *sink.Message, _ int) error {
			if m.EventID == failID {
				return errors.New("injected failure")
			}
			return nil
		}
	}
	p := newTxnPipeline(t, b, lim, func(c *Config) {
		c.MaxInflightEvents = 1 + r.IntN(200)
		c.Lanes = 1 + r.IntN(8)
		c.MaxBatchEvents = 1 + r.IntN(50)
	})
	in := make(chan *binlog.Txn, []int{0, 4, len(txns)}[r.IntN(3)])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	var err error
	stopped := false
feed:
	for _, x := range txns {
		select {
		case in <- x:
		case err = <-done:
			stopped = true
			break feed
		}
	}
	if !stopped {
		close(in)
		err = <-done
	}
	var ae *TxnAbortedError
	switch {
	case failID == "" && err != nil:
		t.Fatal(err)
	case failID != "" && !errors.As(err, &ae):
		t.Fatalf("Run = %v, want a TxnAbortedError for %s", err, failID)
	case failID == "" && stopped:
		t.Fatal("pipeline stopped taking transactions")
	}

	commits, _, aborts := b.snapshot()
	if failID == "" && aborts != 0 || failID != "" && aborts != 1 {
		t.Fatalf("%d aborts", aborts)
	}
	for _, m := range b.stored[b.from:] {
		t.Fatalf("event %s left in an open transaction", m.EventID)
	}
	last := 0
	var all []*sink.Message
	for k, c := range commits {
		seq := setSeq(t, c.c.GTIDSet)
		if seq < last {
			t.Fatalf("commit %d: checkpoint went back from %d to %d", k, last, seq)
		}
		in := map[string]bool{}
		events, bytes := 0, 0
		for _, m := range c.msgs {
			if q := seqOfID[m.EventID]; q <= last || q > seq {
				t.Fatalf("commit %d covers (%d, %d] but holds %s of transaction %d", k, last, seq, m.EventID, q)
			}
			in[m.EventID] = true
			events++
			bytes += m.Size()
		}
		for q := last + 1; q <= seq; q++ {
			for _, id := range needs[q] {
				if !in[id] {
					t.Fatalf("commit %d covers transaction %d but lacks its event %s", k, q, id)
				}
			}
		}
		if seq > last {
			// At the boundary before the last transaction the limits were not reached yet, or the
			// commit would have been made there.
			lastEvents := len(needs[seq])
			lastBytes := 0
			for _, m := range c.msgs {
				if seqOfID[m.EventID] == seq {
					lastBytes += m.Size()
				}
			}
			if seq-1 > last && (events-lastEvents >= lim.MaxEvents || bytes-lastBytes >= lim.MaxBytes) && lim.MaxAge == time.Hour {
				t.Fatalf("commit %d of %d events, %d bytes passed a boundary at the limits %d events, %d bytes", k, events, bytes, lim.MaxEvents, lim.MaxBytes)
			}
		}
		all = append(all, c.msgs...)
		last = seq
	}
	if got, want := p.Committed().String(), fmt.Sprintf("0-1-%d", last); got != want && last > 0 {
		t.Fatalf("Committed = %s, want the last commit's %s", got, want)
	}
	if failID != "" {
		if last >= seqOfID[failID] {
			t.Fatalf("commits reach transaction %d, past the failed event %s of transaction %d", last, failID, seqOfID[failID])
		}
		t.Logf("aborted at %s (transaction %d) after %d commits up to %d", failID, seqOfID[failID], len(commits), last)
		pos := map[string]int{}
		for i, id := range committed {
			pos[id] = i
		}
		checkFirstDeliveryOrder(t, all, pos)
		return
	}
	if last != nTxns {
		t.Fatalf("last commit covers %d, want %d", last, nTxns)
	}
	if len(all) != len(committed) {
		t.Fatalf("%d events committed, want %d (exactly once each)", len(all), len(committed))
	}
	pos := map[string]int{}
	for i, id := range committed {
		pos[id] = i
	}
	if n := checkFirstDeliveryOrder(t, all, pos); n != len(committed) {
		t.Fatalf("%d of %d events committed", n, len(committed))
	}
	t.Logf("%d txns, %d events, limits %+v: %d commits", nTxns, len(committed), lim, len(commits))
}

// The limits split commits at boundaries: a source transaction larger than MaxEvents stays in
// one commit, and the next starts after it.
func TestTxnLimitsSplitAtBoundariesOnly(t *testing.T) {
	b := &txnBroker{}
	p := newTxnPipeline(t, b, Transactions{MaxEvents: 2, MaxAge: time.Hour}, nil)
	big := txn(2, "a:2", "b:3", "c:4", "d:5")
	err := runAll(t, p, txn(1, "a:1"), big, txn(3, "a:6"), txn(4, "b:7"), txn(5, "c:8"))
	if err != nil {
		t.Fatal(err)
	}
	commits, _, _ := b.snapshot()
	var got []string
	for _, c := range commits {
		got = append(got, c.c.GTIDSet+"="+fmt.Sprint(len(c.msgs)))
	}
	// 1+4 events pass the limit at 0-1-2's end; 6 and 7 reach it at 0-1-4; 8 is the rest (the
	// input closed); the final commit at the end holds nothing new.
	if want := "0-1-2=5 0-1-4=2 0-1-5=1 0-1-5=0"; strings.Join(got, " ") != want {
		t.Fatalf("commits %s, want %s", strings.Join(got, " "), want)
	}
}

// An idle input commits at once what was sent, with no timer.
func TestTxnIdleInputCommitsPromptly(t *testing.T) {
	b := &txnBroker{}
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
	r := startStepwise(t, p)
	r.send(txn(1, "a:1", "b:2"))
	commits := b.waitCommits(t, 1)
	if commits[0].c.GTIDSet != "0-1-1" || commitIDs(commits[0]) == "" || len(commits[0].msgs) != 2 {
		t.Fatalf("commit %s holding %q", commits[0].c.GTIDSet, commitIDs(commits[0]))
	}
	if got := p.Committed().String(); got != "0-1-1" {
		t.Fatalf("Committed = %s", got)
	}
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
}

// The idle rule's wait for the drain does not stop the dispatcher from taking the next
// transaction: one arriving while the previous sends are unacknowledged is taken at once (and
// the commit waits for a real pause), not after the next acknowledgement.
func TestTxnIdleWaitTakesTheNextTransaction(t *testing.T) {
	b := &txnBroker{}
	b.block = make(chan struct{})
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
	r := startStepwise(t, p)
	r.send(txn(1, "a:1"))
	select {
	case r.in <- txn(2, "b:2"):
	case <-time.After(2 * time.Second):
		t.Fatal("the dispatcher did not take 0-1-2 while 0-1-1's send was unacknowledged")
	}
	close(b.block)
	commits := b.waitCommits(t, 1)
	if got := commits[0].c.GTIDSet; got != "0-1-2" || len(commits[0].msgs) != 2 {
		t.Fatalf("first commit %s holding %q, want 0-1-2 holding both events", got, commitIDs(commits[0]))
	}
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
}

// MaxAge commits the progress of transactions without outbox rows while the input is idle.
func TestTxnMaxAgeCommitsGTIDOnlyProgress(t *testing.T) {
	b := &txnBroker{}
	p := newTxnPipeline(t, b, Transactions{MaxAge: 20 * time.Millisecond}, nil)
	r := startStepwise(t, p)
	r.send(txn(1), txn(2))
	commits := b.waitCommits(t, 1)
	if commits[0].c.GTIDSet != "0-1-2" || len(commits[0].msgs) != 0 {
		t.Fatalf("commit %s holding %q, want 0-1-2 and nothing", commits[0].c.GTIDSet, commitIDs(commits[0]))
	}
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
}

// A failed send is not resent: the run aborts the broker transaction and returns a
// TxnAbortedError naming the rows refused for good; the committed set stays where it was.
func TestTxnSendFailureAborts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		rejected string
	}{
		{"permanent", sink.Permanent(errors.New("message too large")), "2"},
		{"transient", errors.New("broker busy"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &txnBroker{memSink: memSink{fail: failOn(func(m *sink.Message) error {
				if m.EventID == "2" {
					return tc.err
				}
				return nil
			})}}
			p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
			r := startStepwise(t, p)
			r.send(txn(1, "a:1"))
			b.waitCommits(t, 1)
			r.send(txn(2, "b:2", "c:3"))
			err := <-r.done
			var ae *TxnAbortedError
			if !errors.As(err, &ae) || !errors.Is(err, sink.ErrTxnAborted) || !strings.Contains(err.Error(), tc.err.Error()) {
				t.Fatalf("Run = %v, want a TxnAbortedError", err)
			}
			if got := strings.Join(ae.Rejected, ","); got != tc.rejected {
				t.Fatalf("Rejected = %q, want %q", got, tc.rejected)
			}
			commits, saves, aborts := b.snapshot()
			if len(commits) != 1 || saves != 1 || aborts != 1 {
				t.Fatalf("%d commits, %d saves, %d aborts; want 1, 1, 1", len(commits), saves, aborts)
			}
			if b.attempts["2"] != 1 {
				t.Fatalf("event 2 sent %d times, want once", b.attempts["2"])
			}
			if got := p.Committed().String(); got != "0-1-1" {
				t.Fatalf("Committed = %s, want 0-1-1", got)
			}
		})
	}
}

// A fenced send or save halts: no further save, no abort, Run returns an error wrapping both
// ErrHalt and sink.ErrFenced.
func TestTxnFencedHalts(t *testing.T) {
	fenced := fmt.Errorf("PRODUCER_FENCED: %w", sink.ErrFenced)
	t.Run("send", func(t *testing.T) {
		b := &txnBroker{memSink: memSink{fail: failOn(func(m *sink.Message) error {
			if m.EventID == "2" {
				return fenced
			}
			return nil
		})}}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
		r := startStepwise(t, p)
		r.send(txn(1, "a:1"))
		b.waitCommits(t, 1)
		r.send(txn(2, "b:2"))
		err := <-r.done
		if !errors.Is(err, ErrHalt) || !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("Run = %v, want ErrHalt and ErrFenced", err)
		}
		if _, saves, aborts := b.snapshot(); saves != 1 || aborts != 0 {
			t.Fatalf("%d saves, %d aborts after the fence; want 1, 0", saves, aborts)
		}
	})
	t.Run("save", func(t *testing.T) {
		b := &txnBroker{saveErr: func(int) error { return fenced }}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
		r := startStepwise(t, p)
		r.send(txn(1, "a:1"))
		err := <-r.done
		if !errors.Is(err, ErrHalt) || !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("Run = %v, want ErrHalt and ErrFenced", err)
		}
		if _, saves, aborts := b.snapshot(); saves != 1 || aborts != 0 {
			t.Fatalf("%d saves, %d aborts; want 1, 0", saves, aborts)
		}
		if got := p.Committed().String(); got != "" {
			t.Fatalf("Committed = %s, want the start", got)
		}
	})
}

// A commit the broker aborted ends the run with a TxnAbortedError; transient save failures are
// retried until the commit succeeds, then until SaveFailureLimit.
func TestTxnSaveFailures(t *testing.T) {
	t.Run("aborted", func(t *testing.T) {
		b := &txnBroker{saveErr: func(int) error { return fmt.Errorf("EndTxn: %w", sink.ErrTxnAborted) }}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
		r := startStepwise(t, p)
		r.send(txn(1, "a:1"))
		err := <-r.done
		var ae *TxnAbortedError
		if !errors.As(err, &ae) || !errors.Is(err, sink.ErrTxnAborted) {
			t.Fatalf("Run = %v, want a TxnAbortedError", err)
		}
		if _, saves, _ := b.snapshot(); saves != 1 {
			t.Fatalf("%d saves after the abort, want 1", saves)
		}
	})
	t.Run("transient", func(t *testing.T) {
		b := &txnBroker{saveErr: func(n int) error {
			if n <= 2 {
				return errors.New("coordinator not available")
			}
			return nil
		}}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
		r := startStepwise(t, p)
		r.send(txn(1, "a:1"))
		commits := b.waitCommits(t, 1)
		if commits[0].c.GTIDSet != "0-1-1" || len(commits[0].msgs) != 1 {
			t.Fatalf("commit %s of %d events", commits[0].c.GTIDSet, len(commits[0].msgs))
		}
		if err := r.finish(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("limit", func(t *testing.T) {
		b := &txnBroker{saveErr: func(int) error { return errors.New("coordinator not available") }}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, func(c *Config) { c.SaveFailureLimit = 30 * time.Millisecond })
		r := startStepwise(t, p)
		r.send(txn(1, "a:1"))
		err := <-r.done
		if !errors.Is(err, ErrCheckpointSave) || !strings.Contains(err.Error(), "saves have failed since") {
			t.Fatalf("Run = %v, want ErrCheckpointSave after the limit", err)
		}
		if _, _, aborts := b.snapshot(); aborts != 1 {
			t.Fatalf("%d aborts, want 1", aborts)
		}
	})
}

// Shutdown drains: with everything handed acknowledged it commits exactly that; with something
// still unacknowledged at the drain timeout it aborts, and Run returns nil either way.
func TestTxnShutdown(t *testing.T) {
	run := func(t *testing.T, release bool) (*txnBroker, *Pipeline) {
		b := &txnBroker{memSink: memSink{block: make(chan struct{})}}
		p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, func(c *Config) {
			c.MaxInflightEvents = 1 // the dispatcher waits for room with txn 2 in hand, txn 3 waiting
			c.DrainTimeout = 100 * time.Millisecond
		})
		in := make(chan *binlog.Txn, 3)
		in <- txn(1, "a:1")
		in <- txn(2, "b:2")
		in <- txn(3, "c:3")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx, in) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		if release {
			close(b.block)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		return b, p
	}
	t.Run("acked", func(t *testing.T) {
		b, p := run(t, true)
		commits, _, aborts := b.snapshot()
		if len(commits) != 1 || commits[0].c.GTIDSet != "0-1-1" || commitIDs(commits[0]) != "t/1" || aborts != 0 {
			t.Fatalf("commits %+v, %d aborts; want one of 0-1-1 holding t/1", commits, aborts)
		}
		if got := p.Committed().String(); got != "0-1-1" {
			t.Fatalf("Committed = %s", got)
		}
	})
	t.Run("unacked", func(t *testing.T) {
		b, p := run(t, false)
		if _, saves, aborts := b.snapshot(); saves != 0 || aborts != 1 {
			t.Fatalf("%d saves, %d aborts; want 0, 1", saves, aborts)
		}
		if got := p.Committed().String(); got != "" {
			t.Fatalf("Committed = %s, want the start", got)
		}
	})
}

// A row listed in DeadLetterEvents is diverted when routed, before anything is sent, and
// audited: a refused send could not be diverted afterwards.
func TestTxnDeadLetterEventsDivertedAtRoute(t *testing.T) {
	b := &txnBroker{memSink: memSink{fail: failOn(func(m *sink.Message) error {
		if m.EventID == "2" && m.Topic != "dlq" {
			return sink.Permanent(errors.New("message too large"))
		}
		return nil
	})}}
	var audit []string
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, func(c *Config) {
		c.DeadLetterEvents = map[string]bool{"2": true}
		c.Audit = func(line string) error { audit = append(audit, line); return nil }
	})
	if err := runAll(t, p, txn(1, "a:1", "b:2"), txn(2, "b:3")); err != nil {
		t.Fatal(err)
	}
	if b.attempts["2"] != 1 {
		t.Fatalf("event 2 sent %d times, want once (as its dead letter)", b.attempts["2"])
	}
	commits, _, aborts := b.snapshot()
	var ids []string
	for _, c := range commits {
		ids = append(ids, commitIDs(c))
	}
	if got := strings.Join(ids, " "); !strings.Contains(got, "dlq/2") || strings.Contains(got, "t/2") || aborts != 0 {
		t.Fatalf("committed %q, %d aborts; want dlq/2 and no t/2", got, aborts)
	}
	if len(audit) != 1 || !strings.Contains(audit[0], `event_id "2"`) {
		t.Fatalf("audit %q", audit)
	}
}

// A commit waits while a prepared XA transaction's rows are held: the checkpoint could not
// cover what was sent after its prepare without the prepare. It commits after the XA COMMIT.
func TestTxnWaitsForXACommit(t *testing.T) {
	b := &txnBroker{}
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
	r := startStepwise(t, p)
	r.send(xaTxn(1, binlog.XAPrepare, "x", "a:1"), txn(2, "b:2"))
	time.Sleep(50 * time.Millisecond)
	if commits, saves, _ := b.snapshot(); saves != 0 {
		t.Fatalf("committed %+v with an XA transaction prepared", commits)
	}
	r.send(xaTxn(3, binlog.XACommit, "x"))
	commits := b.waitCommits(t, 1)
	if commits[0].c.GTIDSet != "0-1-3" || len(commits[0].msgs) != 2 {
		t.Fatalf("commit %s holding %q, want 0-1-3 with both rows", commits[0].c.GTIDSet, commitIDs(commits[0]))
	}
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
}

// An idle commit waits for the acknowledgements; when the input fills meanwhile, the reader only
// paused, and the commit is left for the next idle boundary: a catch-up does not commit after
// every source transaction.
func TestTxnIdleCommitYieldsToInput(t *testing.T) {
	b := &txnBroker{memSink: memSink{block: make(chan struct{})}}
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, nil)
	in := make(chan *binlog.Txn, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	in <- txn(1, "a:1")
	time.Sleep(30 * time.Millisecond) // handed; the idle commit waits for its acknowledgement
	in <- txn(2, "b:2")
	time.Sleep(30 * time.Millisecond)
	close(b.block)
	commits := b.waitCommits(t, 1)
	if commits[0].c.GTIDSet != "0-1-2" || len(commits[0].msgs) != 2 {
		t.Fatalf("first commit %s holding %q, want 0-1-2 with both events", commits[0].c.GTIDSet, commitIDs(commits[0]))
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Cleanup hears of a commit only once it succeeded, and a poison row under stop still commits
// what came before it.
func TestTxnCleanupAndPoisonStop(t *testing.T) {
	b := &txnBroker{saveErr: func(n int) error {
		if n == 1 {
			return errors.New("coordinator not available")
		}
		return nil
	}}
	cl := newRecCleanup(t)
	cl.wantBySeq[0] = map[string]bool{"1": false}
	p := newTxnPipeline(t, b, Transactions{MaxAge: time.Hour}, func(c *Config) { c.Cleanup = cl })
	r := startStepwise(t, p)
	r.send(txn(1, "a:1")) // idle: its commit fails once, then succeeds
	b.waitCommits(t, 1)
	r.send(txn(2, "a:2@nowhere"))
	err := <-r.done
	var pe *PoisonError
	if !errors.As(err, &pe) {
		t.Fatalf("Run = %v, want a PoisonError", err)
	}
	commits, saves, aborts := b.snapshot()
	// The final commit at the stop covers 0-1-1 again, with nothing new.
	if len(commits) != 2 || commits[1].c.GTIDSet != "0-1-1" || len(commits[1].msgs) != 0 || saves != 3 || aborts != 0 {
		t.Fatalf("%d saves, %d aborts, commits %+v; want 0-1-1 committed after a failed save, then again at the stop", saves, aborts, commits)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if fmt.Sprint(cl.saved) != "[1 1]" {
		t.Fatalf("Cleanup.Saved %v; want [1 1], one per successful commit", cl.saved)
	}
}

// A row the broker refuses for good goes to the dead letter when streamed again, then without
// its payload, and a third refusal is the end: streaming it again would abort again.
func TestDivertedEscalates(t *testing.T) {
	d := Diverted{Events: map[string]bool{"op": true}} // an operator's --dead-letter-event
	if id := d.Escalate([]string{"a"}); id != "" || !d.Events["a"] || d.Stripped["a"] {
		t.Fatalf("first refusal: exhausted %q, events %v, stripped %v", id, d.Events, d.Stripped)
	}
	if id := d.Escalate([]string{"a", "op"}); id != "" || !d.Stripped["a"] || !d.Stripped["op"] {
		t.Fatalf("refused dead letters: exhausted %q, stripped %v", id, d.Stripped)
	}
	if id := d.Escalate([]string{"b", "a"}); id != "a" || !d.Events["b"] {
		t.Fatalf("a dead letter refused without its payload: exhausted %q (want a), events %v", id, d.Events)
	}
}
