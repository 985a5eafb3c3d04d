package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// benchSink is a broker outboxd relays to in one workload: its config entry and a way to tell
// when n messages are stored.
type benchSink interface {
	kind() string // "kafka" or "rocketmq"
	sinkYAML() string
	topic() string
	// waitCount blocks until n messages are stored, check fails, or ctx ends, and returns when
	// the count was first seen.
	waitCount(ctx context.Context, n int64, check func() error) (time.Time, error)
	close()
}

type kafkaSink struct {
	c *kafkaProc
	t string
	// noIdem sets the sink's idempotent: false (the sink before idempotence was its default).
	noIdem bool
}

func newKafkaSink(topic string) (*kafkaSink, error) {
	c, err := newKafka(topic)
	if err != nil {
		return nil, err
	}
	return &kafkaSink{c: c, t: topic}, nil
}

func (k *kafkaSink) kind() string {
	if k.noIdem {
		return "kafka-noidem"
	}
	return "kafka"
}

func (k *kafkaSink) sinkYAML() string {
	if k.noIdem {
		return fmt.Sprintf("{type: kafka, brokers: [%q], idempotent: false}", k.c.addrs[0])
	}
	return kafkaSinkYAML(k.c.addrs)
}

func (k *kafkaSink) topic() string  { return k.t }
func (k *kafkaSink) close()         { k.c.Close() }
func (k *kafkaSink) brokerPID() int { return k.c.pid() }
func (k *kafkaSink) waitCount(ctx context.Context, n int64, check func() error) (time.Time, error) {
	return waitEndOffsets(ctx, k.c.addrs, k.t, n, 50*time.Millisecond, check)
}

// rmqQueues is the queue count of the RocketMQ benchmark topic.
const rmqQueues = 8

type rmqSink struct {
	c *rocketmq.Cluster
	t string
}

func newRMQSink(topic string) (*rmqSink, error) {
	c, err := rocketmq.Start(rocketmq.Options{Topics: []string{topic}, Queues: rmqQueues})
	if err != nil {
		return nil, fmt.Errorf("start RocketMQ test broker: %w", err)
	}
	return &rmqSink{c: c, t: topic}, nil
}

func (r *rmqSink) kind() string { return "rocketmq" }
func (r *rmqSink) sinkYAML() string {
	return fmt.Sprintf("{type: rocketmq, nameservers: [%q], group: outboxd-bench}", r.c.NameServer())
}
func (r *rmqSink) topic() string { return r.t }
func (r *rmqSink) close()        { r.c.Close() }

// sends counts the messages the broker stored (a batch request stores several). It is cheap,
// unlike Messages, which copies every stored body.
func (r *rmqSink) sends() int64 {
	return int64(r.c.Stored(r.t))
}

func (r *rmqSink) waitCount(ctx context.Context, n int64, check func() error) (time.Time, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if r.sends() >= n {
			return time.Now(), nil
		}
		if check != nil {
			if err := check(); err != nil {
				return time.Time{}, fmt.Errorf("%d of %d sends to %s: %w", r.sends(), n, r.t, err)
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d sends to %s: %w", r.sends(), n, r.t, ctx.Err())
		case <-t.C:
		}
	}
}
