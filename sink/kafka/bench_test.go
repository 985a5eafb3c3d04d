package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
)

// The throughput benchmarks: kfake in process as the broker, one topic of benchPartitions
// partitions, 1 KiB values, benchKeys distinct keys split disjointly over the lanes, each lane
// sending batches of the given size with one Send in flight (the pipeline's shape). One op is
// one message, so allocs/op and B/op are per message; events/s is the figure that matters.
//
//	go test ./sink/kafka -run '^$' -bench 'BenchmarkSend' -benchtime 200000x -timeout 30m
const (
	benchPartitions = 12
	benchKeys       = 10_000
	benchValueBytes = 1024
)

var (
	benchLanes   = []int{16, 64}
	benchBatches = []int{10, 100, 1000, 5000}
)

// sendFunc is one implementation under test: it must return only after the broker
// acknowledged every message (acks=all) or with an error.
type sendFunc func(ctx context.Context, msgs []*sink.Message) error

// benchCluster starts kfake with one topic and returns its addresses and topic name.
func benchCluster(b *testing.B) (addrs []string, topic string) {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	addrs = c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	topic = "bench"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, benchPartitions, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	return addrs, topic
}

// laneMessages builds lane's batches: the keys k with k%lanes == lane, cycled, batch messages
// each, enough batches to cover total messages.
func laneMessages(topic string, lane, lanes, batch, total int) [][]*sink.Message {
	value := make([]byte, benchValueBytes)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var keys [][]byte
	for k := lane; k < benchKeys; k += lanes {
		keys = append(keys, []byte(fmt.Sprintf("key-%05d", k)))
	}
	now := time.Now()
	var out [][]*sink.Message
	seq := 0
	for left := total; left > 0; left -= batch {
		n := min(batch, left)
		ms := make([]*sink.Message, n)
		for i := range ms {
			ms[i] = &sink.Message{
				Topic:   topic,
				Key:     keys[seq%len(keys)],
				Value:   value,
				Headers: []sink.Header{{Key: "event_id", Value: []byte(fmt.Sprint(seq))}},
				Time:    now,
			}
			seq++
		}
		out = append(out, ms)
	}
	return out
}

// runSendBench sends b.N messages over lanes goroutines and reports events/s.
func runSendBench(b *testing.B, topic string, lanes, batch int, send sendFunc) {
	b.Helper()
	// Warm up metadata and connections outside the timed region.
	if err := send(context.Background(), laneMessages(topic, 0, lanes, 1, 1)[0]); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	work := make([][][]*sink.Message, lanes)
	for l := range lanes {
		share := b.N / lanes
		if l < b.N%lanes {
			share++
		}
		if share > 0 {
			work[l] = laneMessages(topic, l, lanes, batch, share)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, lanes)
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ms := range work[l] {
				if err := send(context.Background(), ms); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatalf("Send: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

func forEachShape(b *testing.B, run func(b *testing.B, lanes, batch int)) {
	for _, lanes := range benchLanes {
		for _, batch := range benchBatches {
			b.Run(fmt.Sprintf("lanes=%d/batch=%d", lanes, batch), func(b *testing.B) { run(b, lanes, batch) })
		}
	}
}

// BenchmarkSendSink measures this package's Sink without idempotence (what the sink did before
// it had it), BenchmarkSendSinkIdempotent with it (the default from config).
func BenchmarkSendSink(b *testing.B)           { benchSink(b, false) }
func BenchmarkSendSinkIdempotent(b *testing.B) { benchSink(b, true) }

func benchSink(b *testing.B, idempotent bool) {
	forEachShape(b, func(b *testing.B, lanes, batch int) {
		addrs, topic := benchCluster(b)
		s, err := New("bench", Config{Brokers: addrs, Timeout: 30 * time.Second, Idempotent: idempotent})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		runSendBench(b, topic, lanes, batch, s.Send)
	})
}
