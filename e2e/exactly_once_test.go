package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// Issue 24's "How it is shown" for exactly-once (the contract: delivery: exactly_once with the
// checkpoint in a Kafka transaction). Every topic is read back by two read_committed clients,
// franz-go and kcat, and each must see every committed row exactly once, per key in order.

// eoCheckpointTopic is checkpoint.topic in these tests.
const eoCheckpointTopic = "outboxd_checkpoints"

// useKafkaStore makes o exactly-once with the Kafka checkpoint store named name on the sink
// "main", and creates the checkpoint topic on kc as `check` would (compacted, one partition).
func useKafkaStore(t *testing.T, kc *kfake.Cluster, o *cfgOpts, name string) {
	t.Helper()
	if err := kc.CreateTopic(eoCheckpointTopic, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatalf("create %s: %v", eoCheckpointTopic, err)
	}
	o.Extra = "delivery: exactly_once\n" + o.Extra
	o.Checkpoint = fmt.Sprintf("store: kafka, name: %s, sink: main, topic: %s", name, eoCheckpointTopic)
}

// keyedWriter commits transactions of 1 to 3 outbox rows from one goroutine on keys k0..k5
// until halted. Each row's payload is {"id", "k", "s"} with s the key's sequence number: one
// goroutine commits, so a key's commit order is its sequence order.
type keyedWriter struct {
	mu     sync.Mutex
	ids    []string
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// eoPayload is a keyedWriter row's payload.
type eoPayload struct {
	ID  string `json:"id"`
	Key string `json:"k"`
	Seq int    `json:"s"`
}

func startKeyedWriter(t *testing.T, w *world, every time.Duration) *keyedWriter {
	ctx, cancel := context.WithCancel(context.Background())
	kw := &keyedWriter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(kw.done)
		seq := map[string]int{}
		n := 0
		for tx := 0; ctx.Err() == nil; tx++ {
			var rows []row
			var ids []string
			for range 1 + tx%3 {
				k := fmt.Sprintf("k%d", n%6)
				id := fmt.Sprintf("eo%06d", n)
				p, _ := json.Marshal(eoPayload{ID: id, Key: k, Seq: seq[k]})
				rows = append(rows, row{EventID: id, Key: k, Topic: "t", Payload: p})
				ids = append(ids, id)
				seq[k]++
				n++
			}
			// Not bound to ctx: a commit the halt cut short could be committed and unrecorded.
			if _, err := commitOne(context.Background(), w, rows...); err != nil {
				kw.mu.Lock()
				kw.err = err
				kw.mu.Unlock()
				return
			}
			kw.mu.Lock()
			kw.ids = append(kw.ids, ids...)
			kw.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-kw.done })
	return kw
}

// halt stops the writer and returns the committed ids in commit order.
func (kw *keyedWriter) halt(t *testing.T) []string {
	t.Helper()
	kw.cancel()
	<-kw.done
	if kw.err != nil {
		t.Fatalf("writer: %v", kw.err)
	}
	return append([]string(nil), kw.ids...)
}

// eoReadBack is what the two read_committed readers saw of the committed ids.
type eoReadBack struct {
	franz, kcat kafkaread.Tally
}

// readBackCommitted waits until the franz-go reader rd has every committed id (or fails after
// timeout), polls a moment more for late duplicates, reads topic t again with kcat, and checks
// per key order on both: the first delivery of each event comes in the order of order(record).
func readBackCommitted(t *testing.T, rd *kafkaread.Reader, broker string, committed []string, timeout time.Duration,
	order func(kafkaread.Record) int) eoReadBack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(kafkaread.Count(rs, committed).Lost) == 0 })
	if err != nil {
		tl := kafkaread.Count(recs, committed)
		t.Fatalf("franz-go read_committed: %d of %d committed events missing after %s (first: %v)", len(tl.Lost), len(committed), timeout, first(tl.Lost, 5))
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	_, _ = rd.PollUntil(sctx, func([]kafkaread.Record) bool { return false })
	scancel()
	var rb eoReadBack
	recs = rd.Records()
	rb.franz = kafkaread.Count(recs, committed)
	checkKeyOrder(t, "franz-go", recs, order)

	// kcat reads to the last stable offset, which an open transaction of outboxd's holds back:
	// read until it has everything (the transactions commit at once when outboxd is idle).
	kafkaread.RequireKcat(t)
	for {
		krecs, err := kafkaread.Kcat(ctx, broker, "t")
		if err != nil {
			t.Fatal(err)
		}
		rb.kcat = kafkaread.Count(krecs, committed)
		if len(rb.kcat.Lost) == 0 {
			checkKeyOrder(t, "kcat", krecs, order)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("kcat read_committed: %d of %d committed events missing (first: %v)", len(rb.kcat.Lost), len(committed), first(rb.kcat.Lost, 5))
		}
		time.Sleep(300 * time.Millisecond)
	}
	for who, tl := range map[string]kafkaread.Tally{"franz-go": rb.franz, "kcat": rb.kcat} {
		if len(tl.Unexpected) > 0 {
			t.Errorf("%s: %d events read that were never committed (first: %v)", who, len(tl.Unexpected), first(tl.Unexpected, 5))
		}
	}
	return rb
}

func first(ids []string, n int) []string { return ids[:min(n, len(ids))] }

// checkKeyOrder fails unless, per topic and key, the first delivery of each event comes in
// increasing order(record), reading recs per partition in offset order.
func checkKeyOrder(t *testing.T, who string, recs []kafkaread.Record, order func(kafkaread.Record) int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, r := range recs {
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		k := r.Topic + "/" + string(r.Key)
		o := order(r)
		if l, ok := last[k]; ok && o <= l {
			t.Fatalf("%s: key %s: event %s (#%d) first arrived after #%d", who, k, r.EventID, o, l)
		}
		last[k] = o
	}
}

// payloadSeq is a keyedWriter record's per-key sequence number.
func payloadSeq(t *testing.T) func(kafkaread.Record) int {
	return func(r kafkaread.Record) int {
		var p eoPayload
		if err := json.Unmarshal(r.Value, &p); err != nil || p.ID != r.EventID {
			t.Fatalf("record %s/%d@%d: payload %q does not name event %s", r.Topic, r.Partition, r.Offset, r.Value, r.EventID)
		}
		return p.Seq
	}
}

// killNineRun runs the built binary while a writer commits rows and kills it with kill -9 at
// a random point five times, restarting it each time; each kill comes once the run delivered
// something, 0-800 ms later. Then it waits for every committed row with both readers, stops
// outboxd gracefully and returns what they saw. Loss, strangers and per-key order are checked
// here; the caller judges duplicates.
func killNineRun(t *testing.T, exactlyOnce bool) eoReadBack {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	o.Interval = "1s" // at-least-once: a second of sends past the checkpoint when the kill comes
	if exactlyOnce {
		useKafkaStore(t, kc, &o, "eo")
	}
	cfgPath := writeCfg(t, o)
	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("kill points seeded %d", seed)

	kw := startKeyedWriter(t, w, 4*time.Millisecond)
	p := startBinary(t, "run", "--config", cfgPath)
	for kill := 1; kill <= 5; kill++ {
		before := len(rd.Records())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(rs) >= before+20 || !p.running() })
		cancel()
		if !p.running() {
			t.Fatalf("run %d exited by itself (%v):\n%s", kill, p.err, tail(p.output(), 40))
		}
		if err != nil {
			t.Fatalf("run %d delivered nothing within 30 s:\n%s", kill, tail(p.output(), 40))
		}
		time.Sleep(time.Duration(rng.Int63n(int64(800 * time.Millisecond))))
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		p.wait(t, 10*time.Second)
		t.Logf("kill -9 #%d: %d records read so far", kill, len(rd.Records()))
		time.Sleep(time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
		p = startBinary(t, "run", "--config", cfgPath)
	}
	time.Sleep(time.Second) // rows keep flowing into the last run
	committed := kw.halt(t)
	rb := readBackCommitted(t, rd, kc.ListenAddrs()[0], committed, 60*time.Second, payloadSeq(t))
	t.Logf("%d committed; franz-go read %d records (%d duplicates), kcat %d (%d duplicates)",
		len(committed), rb.franz.Records, rb.franz.Duplicates, rb.kcat.Records, rb.kcat.Duplicates)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("graceful stop exited %d:\n%s", code, tail(p.output(), 40))
	}
	return rb
}

// kill -9 at five random points while rows flow, exactly-once: both read_committed readers see
// every committed row once, per key in order; what a killed run had sent in its open
// transaction was aborted (by the restart's InitProducerID) and resent in a committed one.
func TestKillNineExactlyOnce(t *testing.T) {
	rb := killNineRun(t, true)
	if rb.franz.Duplicates != 0 || rb.kcat.Duplicates != 0 {
		t.Fatalf("exactly-once: duplicates seen by a read_committed consumer: franz-go %d, kcat %d, want 0",
			rb.franz.Duplicates, rb.kcat.Duplicates)
	}
}

// The same run at least once (the default) shows duplicates: the test can see them. Both
// readers must count the same ones.
func TestKillNineAtLeastOnceShowsDuplicates(t *testing.T) {
	rb := killNineRun(t, false)
	if rb.franz.Duplicates == 0 {
		t.Fatal("at-least-once: no duplicate after five kill -9: the exactly-once twin could not see one")
	}
	if rb.kcat.Duplicates != rb.franz.Duplicates || rb.kcat.Records != rb.franz.Records {
		t.Fatalf("the readers disagree: franz-go %+v, kcat %+v", rb.franz, rb.kcat)
	}
}

// An HA pair under exactly-once. The leader is frozen (SIGSTOP) past its lease while rows
// flow; the standby takes over, InitProducerID with the same transactional id fences the old
// producer at the broker, and delivers. Woken (SIGCONT), the old leader's sends and commits are
// refused by the broker: it counts them (outboxd_kafka_fenced_total) or, if it exits, says it
// was fenced. The read_committed readers see every committed row once, per key in order.
func TestHAExactlyOnceFencedLeader(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 2, Lease: 3 * time.Second, Interval: "1s", ExactlyOnce: true})
	a, b := h.start(0), h.inst[1]
	stA, _ := h.waitRole(a, "leader", 30*time.Second)
	h.start(1)
	h.waitRole(b, "standby", 30*time.Second)
	rd, err := kafkaread.NewReader(h.kc.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	grow := func(n int, within time.Duration, what string) {
		t.Helper()
		before := len(rd.Records())
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		if _, err := rd.PollUntil(ctx, func(rs []kafkaread.Record) bool { return len(rs) >= before+n }); err != nil {
			t.Fatalf("%s: fewer than %d records within %s", what, n, within)
		}
	}
	f := h.startFlow("ev", 5*time.Millisecond)
	grow(50, 30*time.Second, "the leader's delivery")

	// a freezes with a send in flight: the broker holds a's next produce request until
	// b has taken over (b's InitProducerID bumped the producer epoch), then answers it, as a
	// request delayed in the network would land after the new leader's first one.
	inFlight, release := holdNextProduce(t, h.kc)
	select {
	case <-inFlight:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader sent nothing within 30 s")
	}
	a.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	W, _ := h.haBound()
	stB, _ := h.waitRole(b, "leader", h.opts.Lease+W+10*time.Second)
	if stB.Epoch <= stA.Epoch {
		t.Fatalf("b's epoch %d, a's %d", stB.Epoch, stA.Epoch)
	}
	grow(20, 30*time.Second, "the new leader's delivery")
	if d := time.Since(frozen); d < h.opts.Lease+W {
		time.Sleep(h.opts.Lease + W - d)
	}
	t.Logf("b leads (epoch %d) and delivers %s after a froze", stB.Epoch, time.Since(frozen))
	release() // a's held request is answered now, under b's epoch: refused

	woke := time.Now()
	a.signal(t, syscall.SIGCONT)
	deadline := woke.Add(30 * time.Second)
	for {
		if !a.p.running() {
			if out := a.p.output(); !strings.Contains(strings.ToLower(out), "fenced") {
				t.Fatalf("the woken leader exited without saying it was fenced:\n%s", tail(out, 30))
			}
			t.Logf("the woken leader exited %s after SIGCONT, saying it was fenced", time.Since(woke))
			break
		}
		if v, ok := a.metric("outboxd_kafka_fenced_total"); ok && v > 0 {
			t.Logf("the woken leader counted %v refusals for fencing %s after SIGCONT", v, time.Since(woke))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after SIGCONT the old leader neither counted a fenced send nor exited:\n%s", tail(a.p.output(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := b.role(); r != "leader" {
		t.Fatalf("b is %q after the old leader woke", r)
	}
	time.Sleep(time.Second) // rows keep flowing under b
	committed := f.halt(t)
	pos := make(map[string]int, len(committed))
	for i, id := range committed {
		pos[id] = i
	}
	rb := readBackCommitted(t, rd, h.kc.ListenAddrs()[0], committed, 30*time.Second,
		func(r kafkaread.Record) int { return pos[r.EventID] })
	t.Logf("%d committed; franz-go read %d records, kcat %d", len(committed), rb.franz.Records, rb.kcat.Records)
	if rb.franz.Duplicates != 0 || rb.kcat.Duplicates != 0 {
		t.Fatalf("duplicates seen by a read_committed consumer across the takeover: franz-go %d, kcat %d, want 0",
			rb.franz.Duplicates, rb.kcat.Duplicates)
	}
}

// holdNextProduce makes c hold the next produce request, unanswered and unprocessed, until
// release is called; inFlight closes once it is held. Other requests go on
// meanwhile (kfake's SleepControl). Later produce requests pass untouched.
func holdNextProduce(t *testing.T, c *kfake.Cluster) (inFlight <-chan struct{}, release func()) {
	t.Helper()
	held, free := make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		// Produce v13 names topics by id only: any topic is a's while a leads, so the next
		// request of any topic is held.
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		close(held)
		c.SleepControl(func() { <-free })
		return nil, nil, false // processed now, after the takeover
	})
	var once sync.Once
	release = func() { once.Do(func() { close(free) }) }
	t.Cleanup(release)
	return held, release
}
