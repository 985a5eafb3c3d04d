package reconcile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/sink/kafkatxn"
)

// KafkaConfig is how a KafkaReader reaches the brokers: the sink's settings.
type KafkaConfig struct {
	Brokers  []string
	ClientID string
	Timeout  time.Duration
	TLS      *tls.Config
	// SASL is the sink's mechanism, nil for none.
	SASL sasl.Mechanism
}

// KafkaReader is a Reader for one Kafka cluster. It fetches partitions directly, with no
// consumer group: nothing is committed, and the account needs only Describe and Read on the
// topics.
//
// It reads read_committed, whatever the delivery mode: under exactly-once every crash, abort
// or fencing leaves aborted records in the topics, and counting one would report an event
// present whose only copy no consumer ever sees (an unsound "nothing missing"). The ends of
// the ranges are the last stable offset, not the high watermark, and aborted records are
// dropped by the broker's aborted-transaction list (kgo's batch processing). It costs an
// at-least-once outboxd nothing: its records are not transactional, so read_committed sees
// every one of them and the last stable offset is the high watermark; and topics written
// under exactly-once before a switch back to at-least-once still hold aborted records. A
// transaction some other producer keeps open holds the last stable offset back: records past
// it are not read (no read_committed consumer has them yet either). kafka-go's fetch cannot do
// this: it sends the isolation level but drops the aborted-transaction list and the batches'
// producer ids, so aborted records are indistinguishable from committed ones.
type KafkaReader struct {
	cl  *kgo.Client
	err error // from building cl, returned by every read
}

// NewKafkaReader returns a reader; it does not contact the brokers.
func NewKafkaReader(c KafkaConfig) *KafkaReader {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = "outboxd-reconcile"
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID), kgo.DialTimeout(c.Timeout), kgo.RequestTimeoutOverhead(c.Timeout)}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(kafkatxn.Mechanism(c.SASL)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &KafkaReader{err: fmt.Errorf("kafka reader: %w", err)}
	}
	return &KafkaReader{cl: cl}
}

// Close releases the connections.
func (k *KafkaReader) Close() error {
	if k.cl != nil {
		k.cl.Close()
	}
	return nil
}

// partRange is the offsets [start, end) of one partition to read.
type partRange struct {
	partition  int
	start, end int64
}

// part is one partition of a topic as the metadata has it: where to fetch it.
type part struct {
	id     int32
	leader int32
}

// Special ListOffsets timestamps.
const (
	latestOffset   = -1
	earliestOffset = -2
)

// Count implements Reader: for each partition it asks for the first offset at or after from
// and the first at or after to (ListOffsets by timestamp; the last stable offset where there
// is none) and reads the committed records between. Record times are outboxd's commit times,
// which are nearly but not strictly ordered within a partition: a record stamped before to that
// follows the first one stamped at or after to is not read, which the slack after the window
// makes unlikely.
func (k *KafkaReader) Count(ctx context.Context, topic string, from, to time.Time, counts map[string]int) error {
	return k.CountTable(ctx, topic, "", from, to, counts)
}

// CountTable implements TableReader: Count of the records whose outbox_table header is table.
func (k *KafkaReader) CountTable(ctx context.Context, topic, table string, from, to time.Time, counts map[string]int) error {
	tl := tally{table: table, counts: counts}
	parts, topicID, err := k.partitions(ctx, topic)
	if err != nil || len(parts) == 0 {
		return err // no topic: nothing was delivered there
	}
	starts, err := k.offsets(ctx, topic, parts, from.UnixMilli())
	if err != nil {
		return err
	}
	// Record times are whole milliseconds: one of to's millisecond may be before to.
	ceilTo := to.Add(time.Millisecond - 1).Truncate(time.Millisecond)
	ends, err := k.offsets(ctx, topic, parts, ceilTo.UnixMilli())
	if err != nil {
		return err
	}
	lasts, err := k.offsets(ctx, topic, parts, latestOffset)
	if err != nil {
		return err
	}
	for _, p := range parts {
		r, ok := readRange(int(p.id), starts[p.id], ends[p.id], lasts[p.id])
		if !ok {
			continue
		}
		if err := k.read(ctx, topic, topicID, p, r, tl.record); err != nil {
			return err
		}
	}
	return nil
}

// ReadTopic calls each with the key and value of every committed record of topic (nil for a
// null one), partition by partition in offset order, from the first offset to the last stable
// offset at the time of the call. A topic that does not exist has no records. It blocks on the
// fetches; an error from each stops it and is returned.
func (k *KafkaReader) ReadTopic(ctx context.Context, topic string, each func(key, value []byte) error) error {
	parts, topicID, err := k.partitions(ctx, topic)
	if err != nil || len(parts) == 0 {
		return err
	}
	firsts, err := k.offsets(ctx, topic, parts, earliestOffset)
	if err != nil {
		return err
	}
	lasts, err := k.offsets(ctx, topic, parts, latestOffset)
	if err != nil {
		return err
	}
	for _, p := range parts {
		var failed error
		err := k.read(ctx, topic, topicID, p, partRange{partition: int(p.id), start: firsts[p.id], end: lasts[p.id]}, func(rec *kgo.Record) {
			if failed == nil {
				failed = each(rec.Key, rec.Value)
			}
		})
		if err == nil {
			err = failed
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// partitions lists topic's partitions and their leaders, and the topic's id (zero before
// Kafka 2.8); none when the topic does not exist.
func (k *KafkaReader) partitions(ctx context.Context, topic string) ([]part, [16]byte, error) {
	if k.err != nil {
		return nil, [16]byte{}, k.err
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, [16]byte{}, fmt.Errorf("metadata: %w", err)
	}
	var parts []part
	var id [16]byte
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, id, nil
			}
			return nil, id, fmt.Errorf("metadata: %w", err)
		}
		id = t.TopicID
		for _, p := range t.Partitions {
			parts = append(parts, part{id: p.Partition, leader: p.Leader})
		}
	}
	slices.SortFunc(parts, func(a, b part) int { return int(a.id - b.id) })
	return parts, id, nil
}

// readRange is the offsets to read of partition p from ListOffsets' answers: start for the
// window's first time, end for the time after it, last the log end offset; a time with no
// record at or after it answers -1. Pure.
func readRange(p int, start, end, last int64) (partRange, bool) {
	if start < 0 || start >= last {
		return partRange{}, false // no record at or after from
	}
	if end < 0 || end > last {
		end = last
	}
	if end <= start {
		return partRange{}, false
	}
	return partRange{partition: p, start: start, end: end}, true
}

// offsets asks ListOffsets, read_committed, for timestamp ts (or latestOffset, which is then
// the last stable offset, or earliestOffset) in each of parts: the first offset at or after
// it, -1 where there is none. kgo sends each partition's question to its leader.
func (k *KafkaReader) offsets(ctx context.Context, topic string, parts []part, ts int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1 // read_committed: "latest" is the last stable offset
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.id
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := make(map[int32]int64, len(parts))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of partition %d: %w", p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	for _, p := range parts {
		if _, ok := out[p.id]; !ok {
			return nil, fmt.Errorf("list offsets of partition %d: no answer", p.id)
		}
	}
	return out, nil
}

// read calls each with the committed records of r in offset order: it fetches from p's leader,
// read_committed, and kgo's batch processing drops control records and the records of aborted
// transactions (the fetch response's aborted-transaction list and each batch's producer id).
// The offset to fetch next comes from that processing, so a stretch of aborted records or
// markers is passed over, not waited on.
func (k *KafkaReader) read(ctx context.Context, topic string, topicID [16]byte, p part, r partRange, each func(*kgo.Record)) error {
	dec := kgo.DefaultDecompressor()
	for off := r.start; off < r.end; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 500
		req.MinBytes = 1
		req.MaxBytes = 4 << 20
		req.IsolationLevel = 1
		req.SessionEpoch = -1 // no fetch session
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.id
		rp.FetchOffset = off
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = 4 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, k.cl.Broker(int(p.leader)))
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("fetch partition %d at offset %d: %w", p.id, off, err)
		}
		var got *kmsg.FetchResponseTopicPartition
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if resp.Topics[i].Partitions[j].Partition == p.id {
					got = &resp.Topics[i].Partitions[j]
				}
			}
		}
		if got == nil {
			return fmt.Errorf("fetch partition %d at offset %d: the broker did not answer for it", p.id, off)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: off, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: p.id,
		}, got, dec, nil)
		if fp.Err != nil {
			return fmt.Errorf("fetch partition %d at offset %d: %w", p.id, off, fp.Err)
		}
		for _, rec := range fp.Records {
			if rec.Offset >= r.end {
				break
			}
			each(rec)
		}
		if next <= off {
			if fp.LastStableOffset <= off {
				return nil // the log ended (records deleted) before r.end
			}
			return fmt.Errorf("fetch partition %d at offset %d: no record returned below the last stable offset %d", p.id, off, fp.LastStableOffset)
		}
		off = next
	}
	return nil
}

// record counts rec's event_id header (when rec is of tl's table).
func (tl tally) record(rec *kgo.Record) {
	var id, table []byte
	for _, h := range rec.Headers {
		switch {
		case h.Key == router.HeaderEventID && id == nil:
			id = h.Value
			if id == nil {
				id = []byte{}
			}
		case h.Key == router.HeaderTable && table == nil:
			table = h.Value
		}
	}
	if id != nil {
		tl.add(string(id), string(table))
	}
}
