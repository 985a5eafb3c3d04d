package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
)

// BenchmarkSendKgo measures franz-go's producer as a franz-go sink would drive it, for the
// comparison in BENCH.md: uncompressed, acks=all, idempotent, murmur2 key placement, every message of a Send
// handed to Produce at once and the Send waiting for all promises. It has none of a sink's
// bookkeeping (failure lists, hold-back, buffer bound), so it is an upper bound for such a sink.
func BenchmarkSendKgo(b *testing.B) {
	for _, linger := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("linger=%v", linger), func(b *testing.B) {
			forEachShape(b, func(b *testing.B, lanes, batch int) {
				addrs, topic := benchCluster(b)
				cl, err := kgo.NewClient(
					kgo.SeedBrokers(addrs...),
					kgo.RequiredAcks(kgo.AllISRAcks()),
					kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
					kgo.ProducerLinger(linger),
					kgo.ProducerBatchMaxBytes(DefaultMaxMessageBytes+4),
					kgo.MaxBufferedRecords(1<<30),
					// kgo defaults to snappy; the kafka-go runs send uncompressed.
					kgo.ProducerBatchCompression(kgo.NoCompression()),
				)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				runSendBench(b, topic, lanes, batch, func(ctx context.Context, msgs []*sink.Message) error {
					recs := make([]kgo.Record, len(msgs))
					var (
						wg    sync.WaitGroup
						mu    sync.Mutex
						first error
					)
					wg.Add(len(msgs))
					for i, m := range msgs {
						r := &recs[i]
						r.Topic, r.Key, r.Value, r.Timestamp = m.Topic, m.Key, m.Value, m.Time
						r.Headers = make([]kgo.RecordHeader, len(m.Headers))
						for j, h := range m.Headers {
							r.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
						}
						cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
							if err != nil {
								mu.Lock()
								if first == nil {
									first = err
								}
								mu.Unlock()
							}
							wg.Done()
						})
					}
					wg.Wait()
					return first
				})
			})
		})
	}
}
