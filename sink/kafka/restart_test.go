package kafka

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkafault"
	"github.com/outboxd/outboxd/testenv/kafkatap"
)

// restartable is a kfake broker on a fixed port with a data dir, behind a fault proxy it
// advertises, as the chaos world runs it: stop and start keep its data.
type restartable struct {
	t     *testing.T
	port  int
	dir   string
	proxy *faultproxy.Proxy
	mu    sync.Mutex
	c     *kfake.Cluster
}

func (r *restartable) start(seed ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		return
	}
	adv, err := kafkatap.Advertise(r.proxy.Addr())
	if err != nil {
		r.t.Fatal(err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(r.port), kfake.DataDir(r.dir), kfake.SyncWrites(), adv,
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn))}
	if len(seed) > 0 {
		opts = append(opts, kfake.SeedTopics(3, seed...))
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := kfake.NewCluster(opts...)
		if err == nil {
			r.c = c
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("restart kfake: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *restartable) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}

func (r *restartable) cluster() *kfake.Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

// Every message an idempotent sink acknowledged is in the topic after the broker restarted
// (Close, then a new cluster on the same data dir) many times while the sink sent, with the
// chaos world's other Kafka faults (proxy blackholes, resets, latency, produce errors) mixed in.
// A live consumer reads along, as the chaos verifier does; the test tells apart a record the
// topic lacks from one the live consumer skipped.
func TestIdempotentAckedSurvivesBrokerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a broker for a while")
	}
	dur := 20 * time.Second
	if v := os.Getenv("RESTART_TEST_DURATION"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			dur = d
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	real := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	px, err := faultproxy.New(real)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const topic = "r"
	b := &restartable{t: t, port: port, dir: t.TempDir(), proxy: px}
	b.start(topic)
	defer b.stop()

	s, err := New("test", Config{Brokers: []string{px.Addr()}, Timeout: 2 * time.Second, MaxMessageBytes: 1 << 20, Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The live consumer, directly to the broker.
	var d net.Dialer
	live, err := kgo.NewClient(kgo.SeedBrokers(real), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, real)
		}))
	if err != nil {
		t.Fatal(err)
	}
	type at struct {
		part int32
		off  int64
	}
	var liveMu sync.Mutex
	liveGot := map[string][]at{}
	liveAt := map[at]string{}
	lctx, stopLive := context.WithCancel(context.Background())
	var lwg sync.WaitGroup
	lwg.Add(1)
	go func() {
		defer lwg.Done()
		for lctx.Err() == nil {
			f := live.PollFetches(lctx)
			liveMu.Lock()
			f.EachRecord(func(r *kgo.Record) {
				id := string(r.Value)
				liveGot[id] = append(liveGot[id], at{r.Partition, r.Offset})
				liveAt[at{r.Partition, r.Offset}] = id
			})
			liveMu.Unlock()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var ackMu sync.Mutex
	acked := map[string]time.Time{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			n := 0
			for ctx.Err() == nil {
				var msgs []*sink.Message
				for range 1 + rng.Intn(8) {
					id := fmt.Sprintf("w%d-%d", w, n)
					n++
					msgs = append(msgs, &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("key%02d", (w*3+rng.Intn(3))%9)), Value: []byte(id), EventID: id})
				}
				// As the pipeline: the failed ones again until none fails.
				for len(msgs) > 0 && ctx.Err() == nil {
					sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
					err := s.Send(sctx, msgs)
					scancel()
					var again []*sink.Message
					if err != nil {
						var se *sink.SendError
						if !errors.As(err, &se) {
							again = msgs
						} else {
							failed := map[int]bool{}
							for _, f := range se.Failures {
								failed[f.Index] = true
								again = append(again, msgs[f.Index])
							}
							ackMu.Lock()
							for i, m := range msgs {
								if !failed[i] {
									acked[m.EventID] = time.Now()
								}
							}
							ackMu.Unlock()
						}
					} else {
						ackMu.Lock()
						for _, m := range msgs {
							acked[m.EventID] = time.Now()
						}
						ackMu.Unlock()
					}
					msgs = again
				}
			}
		}()
	}

	// The faults, one at a time.
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	faults := map[string]int{}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(rng.Intn(400)) * time.Millisecond)
		kinds := []string{"restart", "restart", "restart", "blackhole", "reset", "latency", "errors", "blackhole+errors"}
		kind := kinds[rng.Intn(len(kinds))]
		faults[kind]++
		hold := time.Duration(100+rng.Intn(1500)) * time.Millisecond
		switch kind {
		case "restart":
			b.stop()
			time.Sleep(hold / 2)
			b.start()
		case "blackhole":
			px.SetMode(faultproxy.Blackhole)
			time.Sleep(hold)
			px.SetMode(faultproxy.Pass)
		case "reset":
			px.ResetAll()
		case "latency":
			px.SetLatency(time.Duration(20+rng.Intn(280)) * time.Millisecond)
			time.Sleep(hold)
			px.SetLatency(0)
		case "errors", "blackhole+errors":
			if kind == "blackhole+errors" {
				// Answers lost in the black hole, then the resends refused: kafka_proxy_blackhole
				// followed by kafka_produce_errors in the chaos run that lost a batch.
				px.SetMode(faultproxy.Blackhole)
				time.Sleep(time.Duration(300+rng.Intn(900)) * time.Millisecond)
				px.SetMode(faultproxy.Pass)
			}
			if c := b.cluster(); c != nil {
				remaining := 1 + rng.Intn(8)
				code := []int16{6, 7}[rng.Intn(2)]
				if kind == "blackhole+errors" {
					code = 6 // NOT_LEADER_FOR_PARTITION: refused, not stored
				}
				kafkafault.FailProduces(c, remaining, code)
			}
			time.Sleep(hold)
		}
	}
	wg.Wait()
	px.SetMode(faultproxy.Pass)
	px.SetLatency(0)
	b.start()
	time.Sleep(2 * time.Second)
	stopLive()
	lwg.Wait()
	live.Close()

	// The read-back with a fresh client.
	cl, err := kgo.NewClient(kgo.SeedBrokers(real), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, real)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(rctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	stored := map[string][]at{}
	read := int64(0)
	for read < total && rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			stored[string(r.Value)] = append(stored[string(r.Value)], at{r.Partition, r.Offset})
			read++
		})
	}
	ackMu.Lock()
	defer ackMu.Unlock()
	missing, skipped, rewritten := 0, 0, 0
	for id, when := range acked {
		if _, ok := stored[id]; !ok {
			missing++
			if missing <= 20 {
				t.Errorf("acknowledged %s (at %s) is not in the topic", id, when.Format("15:04:05.000"))
			}
			continue
		}
		if _, ok := liveGot[id]; !ok {
			skipped++
			if skipped <= 20 {
				t.Errorf("acknowledged %s is in the topic at %v, the live consumer never got it (it got %q there)", id, stored[id], liveAt[stored[id][0]])
			}
		}
	}
	for a, id := range liveAt {
		if ls := stored[id]; len(ls) > 0 {
			found := false
			for _, l := range ls {
				found = found || l == a
			}
			if !found {
				rewritten++
				if rewritten <= 20 {
					t.Errorf("the live consumer got %s at %d/%d; the topic holds it at %v", id, a.part, a.off, ls)
				}
			}
		}
	}
	t.Logf("%d acknowledged, %d records in the topic (%d read), faults %v; missing %d, skipped by the live consumer %d, offsets rewritten %d",
		len(acked), total, read, faults, missing, skipped, rewritten)
	if len(acked) < 100 {
		t.Fatalf("only %d acknowledged", len(acked))
	}
}
