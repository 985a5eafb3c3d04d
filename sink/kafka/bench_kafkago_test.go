package kafka

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/sink"
)

// The kafka-go Writer baseline (figures in BENCH.md). BenchmarkSendSink measures this
// package's Sink, which uses kafka-go's protocol-level Client.

// BenchmarkSendKafkaGoWriter measures kafka-go's Writer configured for outboxd's guarantees as
// far as it can be: acks=all, Java-compatible murmur2 placement, a 1 ms linger, synchronous
// WriteMessages called concurrently by every lane (the Writer batches across callers).
func BenchmarkSendKafkaGoWriter(b *testing.B) {
	forEachShape(b, func(b *testing.B, lanes, batch int) {
		addrs, topic := benchCluster(b)
		w := &kafkago.Writer{
			Addr:         kafkago.TCP(addrs...),
			Topic:        topic,
			Balancer:     &kafkago.Murmur2Balancer{Consistent: true},
			RequiredAcks: kafkago.RequireAll,
			BatchTimeout: time.Millisecond,
			BatchSize:    1000,
			BatchBytes:   1 << 20,
			MaxAttempts:  1,
		}
		defer w.Close()
		runSendBench(b, topic, lanes, batch, func(ctx context.Context, msgs []*sink.Message) error {
			kms := make([]kafkago.Message, len(msgs))
			for i, m := range msgs {
				hs := make([]kafkago.Header, len(m.Headers))
				for j, h := range m.Headers {
					hs[j] = kafkago.Header{Key: h.Key, Value: h.Value}
				}
				kms[i] = kafkago.Message{Key: m.Key, Value: m.Value, Headers: hs, Time: m.Time}
			}
			return w.WriteMessages(ctx, kms...)
		})
	})
}
