package kafka

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
	"github.com/outboxd/outboxd/testenv/kafkafault"
)

// env is an in-process kfake cluster plus a real franz-go client to create topics and read back.
type env struct {
	c     *kfake.Cluster
	addrs []string
	adm   *kadm.Client
	fwd   *kgo.Client // for partialFailure
	seq   atomic.Int64
}

func newEnv(t *testing.T, opts ...kfake.Opt) *env {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	// Produce v13 names topics by id; the requests partialFailure forwards carry only names.
	fwd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		t.Fatalf("forwarding client: %v", err)
	}
	t.Cleanup(fwd.Close)
	return &env{c: c, addrs: addrs, adm: kadm.NewClient(cl), fwd: fwd}
}

func (e *env) sink(t *testing.T, mod func(*Config)) *Sink {
	t.Helper()
	cfg := Config{Brokers: e.addrs, Timeout: 5 * time.Second, MaxMessageBytes: 64 << 10}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New("test", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *env) topic(t *testing.T, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("t%d", e.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.adm.CreateTopic(ctx, partitions, 1, nil, name); err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
	return name
}

// read waits until at least n records are stored in topic and returns all of them, by
// partition, each partition in offset order, consumed with a real franz-go client.
func (e *env) read(t *testing.T, topic string, n int) []sinktest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ends map[int32]int64
	for {
		lo, err := e.adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			t.Fatalf("listing end offsets of %s: %v", topic, err)
		}
		ends = map[int32]int64{}
		total := int64(0)
		lo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset; total += o.Offset })
		if total >= int64(n) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s holds %d records, want at least %d", topic, total, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
	parts := map[int32]kgo.Offset{}
	left := 0
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
			left += int(end)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	type rec struct {
		r      sinktest.Received
		offset int64
	}
	var recs []rec
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %d records left: %v", topic, left, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return // stored after we listed the end offsets
			}
			left--
			var hs []sink.Header
			for _, h := range r.Headers {
				hs = append(hs, sink.Header{Key: h.Key, Value: h.Value})
			}
			recs = append(recs, rec{sinktest.Received{
				Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: hs, Time: r.Timestamp, Queue: int(r.Partition),
			}, r.Offset})
		})
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].r.Queue != recs[j].r.Queue {
			return recs[i].r.Queue < recs[j].r.Queue
		}
		return recs[i].offset < recs[j].offset
	})
	out := make([]sinktest.Received, len(recs))
	for i := range recs {
		out[i] = recs[i].r
	}
	return out
}

func hasTopic(req *kmsg.ProduceRequest, topic string, partition int32) bool {
	for _, t := range req.Topics {
		if t.Topic != topic {
			continue
		}
		if partition < 0 {
			return true
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return true
			}
		}
	}
	return false
}

// failProduce answers the partition batches of topic in the next count produce requests that
// carry it (count < 0: until the test ends) with code instead of storing them: the batch of
// partition, or when partition is negative the first batch of topic in each request. The
// request's other partitions are stored and answered as a broker does, each on its own (see
// partialFailure).
func (e *env) failProduce(topic string, partition int32, code int16, count int) {
	var mu sync.Mutex
	left := count
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == forwardedMarker || !hasTopic(req, topic, partition) {
			return nil, nil, false
		}
		mu.Lock()
		if left == 0 {
			mu.Unlock()
			e.c.DropControl()
			return nil, nil, false
		}
		if left > 0 {
			left--
		}
		if left != 0 {
			e.c.KeepControl()
		}
		mu.Unlock()
		first := true
		return e.partialFailure(req, code, func(t string, p int32) bool {
			if t != topic || partition >= 0 && p != partition || partition < 0 && !first {
				return false
			}
			first = false
			return true
		}), nil, true
	})
}

// forwardedMarker is the TimeoutMillis of the produce requests partialFailure forwards, so the
// control functions let them through.
const forwardedMarker = 29_999

// partialFailure answers req as a broker does when the partitions for which bad is true fail
// with code: those store nothing and carry code, the others are stored (forwarded to the
// cluster in a request of their own while this control function sleeps) with their own answer.
func (e *env) partialFailure(req *kmsg.ProduceRequest, code int16, bad func(topic string, partition int32) bool) *kmsg.ProduceResponse {
	resp := kafkafault.ProduceError(req, code)
	type tp struct {
		topic     string
		partition int32
	}
	failed := map[tp]bool{} // bad may be stateful: ask once per partition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			failed[tp{t.Topic, p.Partition}] = bad(t.Topic, p.Partition)
		}
	}
	fwd := kmsg.NewPtrProduceRequest()
	fwd.Acks, fwd.TimeoutMillis = req.Acks, forwardedMarker
	for _, t := range req.Topics {
		ft := kmsg.NewProduceRequestTopic()
		ft.Topic = t.Topic
		for _, p := range t.Partitions {
			if !failed[tp{t.Topic, p.Partition}] {
				ft.Partitions = append(ft.Partitions, p)
			}
		}
		if len(ft.Partitions) > 0 {
			fwd.Topics = append(fwd.Topics, ft)
		}
	}
	if len(fwd.Topics) == 0 {
		return resp
	}
	done := make(chan struct{})
	var got kmsg.Response
	var err error
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err = e.fwd.Request(ctx, fwd)
	}()
	e.c.SleepControl(func() { <-done })
	answers := map[string]map[int32]kmsg.ProduceResponseTopicPartition{}
	if fr, ok := got.(*kmsg.ProduceResponse); ok && err == nil {
		for _, t := range fr.Topics {
			for _, p := range t.Partitions {
				if answers[t.Topic] == nil {
					answers[t.Topic] = map[int32]kmsg.ProduceResponseTopicPartition{}
				}
				answers[t.Topic][p.Partition] = p
			}
		}
	}
	for ti := range resp.Topics {
		rt := &resp.Topics[ti]
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			if failed[tp{rt.Topic, rp.Partition}] {
				continue
			}
			if a, ok := answers[rt.Topic][rp.Partition]; ok {
				rp.ErrorCode, rp.BaseOffset = a.ErrorCode, a.BaseOffset
			} else {
				rp.ErrorCode = codeNotEnoughReplicas // the forward failed: nothing known to be stored
			}
		}
	}
	return resp
}

// hold leaves produce requests for topic unanswered until release; with drop, they are then
// answered never (the client times out), otherwise they are processed normally.
func (e *env) hold(t *testing.T, topic string, drop bool) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if !hasTopic(req, topic, -1) {
			return nil, nil, false
		}
		select {
		case <-ch:
			e.c.DropControl()
			return nil, nil, false
		default:
		}
		e.c.KeepControl()
		if drop {
			return nil, nil, true // no response, no error: the connection just stays silent
		}
		e.c.SleepControl(func() { <-ch })
		return nil, nil, false
	})
	return release
}

// countProduce counts produce requests for topic.
func (e *env) countProduce(topic string) *atomic.Int64 {
	var n atomic.Int64
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if hasTopic(kreq.(*kmsg.ProduceRequest), topic, -1) {
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

const (
	codeNotEnoughReplicas int16 = 19
	codeMessageTooLarge   int16 = 10
	codeInvalidRecord     int16 = 87
)

func (e *env) harness(mod func(*Config)) sinktest.Harness {
	return sinktest.Harness{
		New:   func(t *testing.T) sink.Sink { return e.sink(t, mod) },
		Topic: func(t *testing.T) string { return e.topic(t, 6) },
		Read:  e.read,
		FailNext: func(_ *testing.T, topic string, transient bool, count int) {
			code := codeInvalidRecord
			if transient {
				code = codeNotEnoughReplicas
			}
			e.failProduce(topic, -1, code, count)
		},
		Hold:         func(t *testing.T, topic string) func() { return e.hold(t, topic, false) },
		UnknownTopic: "no-such-topic",
		CreateTopic: func(t *testing.T, topic string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := e.adm.CreateTopic(ctx, 4, 1, nil, topic); err != nil {
				t.Fatalf("creating topic %s: %v", topic, err)
			}
		},
		MaxMessageBytes: 64 << 10,
	}
}
