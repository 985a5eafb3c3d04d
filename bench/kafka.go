package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchPartitions is the partition count of every benchmark topic.
const benchPartitions = 12

// kafkaProc is a kfake broker in a child process of its own (this binary, re-executed with
// OUTBOXD_BENCH_KFAKE set): a fresh process per workload, so a previous workload's million
// records cannot cost this one garbage-collection time, and the broker's CPU is measured apart
// from the harness's.
type kafkaProc struct {
	addrs []string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// kfakeEnv names the topic a child broker seeds; its presence makes main serve kfake.
const kfakeEnv = "OUTBOXD_BENCH_KFAKE"

// newKafka starts a fresh kfake broker process holding topic.
func newKafka(topic string) (*kafkaProc, error) { return newKafkaStamped(topic, "") }

// newKafkaStamped is newKafka with a broker that, when stamps is not "", writes the arrival time
// of every produced record to that file as it exits (see brokerStamps).
func newKafkaStamped(topic, stamps string) (*kafkaProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), kfakeEnv+"="+topic)
	if stamps != "" {
		cmd.Env = append(cmd.Env, kfakeStampsEnv+"="+stamps)
	}
	cmd.Stderr = os.Stderr
	setPdeathsig(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kfake process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("kfake process did not report its address: %w", err)
	}
	return &kafkaProc{addrs: strings.Fields(line), cmd: cmd, stdin: stdin}, nil
}

func (k *kafkaProc) pid() int { return k.cmd.Process.Pid }

// Close ends the broker process (it exits when its stdin closes) and waits for it.
func (k *kafkaProc) Close() {
	_ = k.stdin.Close()
	done := make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = k.cmd.Process.Kill()
		<-done
	}
}

// serveKfake is the child's side: a one-broker kfake cluster with topic, its addresses on
// stdout, alive until stdin closes.
func serveKfake(topic string) int {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, topic))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench kfake:", err)
		return 1
	}
	defer c.Close()
	var stamps *brokerStamps
	path := os.Getenv(kfakeStampsEnv)
	if path != "" {
		stamps = &brokerStamps{}
		stamps.hook(c)
	}
	var shape produceShape
	shape.hook(c)
	fmt.Println(strings.Join(c.ListenAddrs(), " "))
	_, _ = io.Copy(io.Discard, os.Stdin)
	shape.print()
	if stamps != nil {
		if err := stamps.write(path); err != nil {
			fmt.Fprintln(os.Stderr, "bench kfake:", err)
			return 1
		}
	}
	return 0
}

func kafkaSinkYAML(addrs []string) string {
	return fmt.Sprintf("{type: kafka, brokers: [%q]}", addrs[0])
}

// endOffsets sums the topic's end offsets: the number of messages stored (no deletes here).
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	lo, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	var sum int64
	var ferr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		sum += o.Offset
	})
	if ferr != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", topic, ferr)
	}
	return sum, nil
}

// waitEndOffsets polls until topic holds at least n messages, check reports a failure (the relay
// died), or ctx ends. It returns when the count was first seen, so the resolution is the period.
func waitEndOffsets(ctx context.Context, addrs []string, topic string, n int64, period time.Duration, check func() error) (time.Time, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return time.Time{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	t := time.NewTicker(period)
	defer t.Stop()
	var have int64
	for {
		have, err = endOffsets(ctx, adm, topic)
		if err == nil && have >= n {
			return time.Now(), nil
		}
		if check != nil {
			if cerr := check(); cerr != nil {
				return time.Time{}, fmt.Errorf("%d of %d messages in %s: %w", have, n, topic, cerr)
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d messages in %s: %w", have, n, topic, ctx.Err())
		case <-t.C:
		}
	}
}

// tracker holds one steady run's commit and receive times, indexed by the generator's sequence
// number, as nanoseconds since the harness's epoch (monotonic clock) plus one, 0 meaning "none".
type tracker struct {
	commit, recv []atomic.Int64
	// sent is when the generator sent row i's INSERT (for the single-connection probe's
	// breakdown); start is the generator's schedule origin, row i being due at start+i/rate.
	sent  []atomic.Int64
	start atomic.Int64
}

func newTracker(capacity int) *tracker {
	return &tracker{commit: make([]atomic.Int64, capacity), recv: make([]atomic.Int64, capacity), sent: make([]atomic.Int64, capacity)}
}

// eventID names message i of run w; parseEventID reverses it.
func eventID(prefix string, w, i int) string { return prefix + strconv.Itoa(w) + "-" + strconv.Itoa(i) }

func parseEventID(prefix, id string) (w, i int, ok bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	return w, i, err1 == nil && err2 == nil
}

// consumer reads a topic with franz-go and stamps each message's receive time into the tracker of
// its run. Stamps are taken when a fetch returns, before the records are walked.
type consumer struct {
	cl       *kgo.Client
	prefix   string
	trackers []atomic.Pointer[tracker]
	epoch    time.Time
	received atomic.Int64
	done     chan struct{}
}

func startConsumer(addrs []string, topic, prefix string, runs int, epoch time.Time, extra ...kgo.Opt) (*consumer, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond), // kfake answers as soon as data arrives
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	k := &consumer{cl: cl, prefix: prefix, trackers: make([]atomic.Pointer[tracker], runs), epoch: epoch, done: make(chan struct{})}
	go k.loop()
	return k, nil
}

func (k *consumer) loop() {
	defer close(k.done)
	for {
		fs := k.cl.PollFetches(context.Background())
		now := int64(time.Since(k.epoch)) + 1
		if fs.IsClientClosed() {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			k.received.Add(1)
			for _, h := range r.Headers {
				if h.Key != "event_id" {
					continue
				}
				w, i, ok := parseEventID(k.prefix, string(h.Value))
				if !ok || w >= len(k.trackers) {
					return
				}
				if t := k.trackers[w].Load(); t != nil && i < len(t.recv) {
					t.recv[i].CompareAndSwap(0, now) // the first copy counts
				}
				return
			}
		})
	}
}

func (k *consumer) close() {
	k.cl.Close()
	<-k.done
}
