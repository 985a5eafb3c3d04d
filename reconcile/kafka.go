package reconcile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/outboxd/outboxd/router"
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
type KafkaReader struct {
	client *kafkago.Client
	tr     *kafkago.Transport
}

// NewKafkaReader returns a reader; it does not contact the brokers.
func NewKafkaReader(c KafkaConfig) *KafkaReader {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = "outboxd-reconcile"
	}
	tr := &kafkago.Transport{ClientID: c.ClientID, DialTimeout: c.Timeout, TLS: c.TLS, SASL: c.SASL}
	return &KafkaReader{tr: tr, client: &kafkago.Client{Addr: kafkago.TCP(c.Brokers...), Timeout: c.Timeout, Transport: tr}}
}

// Close releases the connections.
func (k *KafkaReader) Close() error {
	k.tr.CloseIdleConnections()
	return nil
}

// partRange is the offsets [start, end) of one partition to read.
type partRange struct {
	partition  int
	start, end int64
}

// Count implements Reader: for each partition it asks for the first offset at or after from
// and the first at or after to (ListOffsets by timestamp; the end of the log where there is
// none) and reads the records between. Record times are outboxd's commit times, which are
// nearly but not strictly ordered within a partition: a record stamped before to that follows
// the first one stamped at or after to is not read, which the slack after the window makes
// unlikely.
func (k *KafkaReader) Count(ctx context.Context, topic string, from, to time.Time, counts map[string]int) error {
	return k.CountTable(ctx, topic, "", from, to, counts)
}

// CountTable implements TableReader: Count of the records whose outbox_table header is table.
func (k *KafkaReader) CountTable(ctx context.Context, topic, table string, from, to time.Time, counts map[string]int) error {
	tl := tally{table: table, counts: counts}
	parts, err := k.partitions(ctx, topic)
	if err != nil || len(parts) == 0 {
		return err // no topic: nothing was delivered there
	}
	starts, err := k.offsets(ctx, topic, parts, func(p int) kafkago.OffsetRequest { return kafkago.TimeOffsetOf(p, from) })
	if err != nil {
		return err
	}
	// Record times are whole milliseconds: one of to's millisecond may be before to.
	ceilTo := to.Add(time.Millisecond - 1).Truncate(time.Millisecond)
	ends, err := k.offsets(ctx, topic, parts, func(p int) kafkago.OffsetRequest { return kafkago.TimeOffsetOf(p, ceilTo) })
	if err != nil {
		return err
	}
	lasts, err := k.offsets(ctx, topic, parts, kafkago.LastOffsetOf)
	if err != nil {
		return err
	}
	for _, p := range parts {
		r, ok := readRange(p, starts[p], ends[p], lasts[p])
		if !ok {
			continue
		}
		if err := k.read(ctx, topic, r, tl.record); err != nil {
			return err
		}
	}
	return nil
}

// ReadTopic calls each with the key and value of every record of topic (nil for a null one),
// partition by partition in offset order, from the first offset to the log end at the time of
// the call. A topic that does not exist has no records. It blocks on the fetches; an error from
// each stops it and is returned.
func (k *KafkaReader) ReadTopic(ctx context.Context, topic string, each func(key, value []byte) error) error {
	parts, err := k.partitions(ctx, topic)
	if err != nil || len(parts) == 0 {
		return err
	}
	firsts, err := k.offsets(ctx, topic, parts, kafkago.FirstOffsetOf)
	if err != nil {
		return err
	}
	lasts, err := k.offsets(ctx, topic, parts, kafkago.LastOffsetOf)
	if err != nil {
		return err
	}
	for _, p := range parts {
		var failed error
		err := k.read(ctx, topic, partRange{partition: p, start: firsts[p], end: lasts[p]}, func(rec kafkago.Record) {
			if failed != nil {
				return
			}
			var key, value []byte
			if key, failed = readBytes(rec.Key); failed == nil {
				if value, failed = readBytes(rec.Value); failed == nil {
					failed = each(key, value)
				}
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

// readBytes reads a record's key or value; nil for a null one.
func readBytes(b kafkago.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return io.ReadAll(b)
}

// partitions lists topic's partitions; none when the topic does not exist.
func (k *KafkaReader) partitions(ctx context.Context, topic string) ([]int, error) {
	md, err := k.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
				return nil, nil
			}
			return nil, fmt.Errorf("metadata: %w", t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	return parts, nil
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

// offsets asks one ListOffsets per kind (a request may name each partition once).
func (k *KafkaReader) offsets(ctx context.Context, topic string, parts []int, req func(int) kafkago.OffsetRequest) (map[int]int64, error) {
	reqs := make([]kafkago.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = req(p)
	}
	kind := reqs[0].Timestamp
	res, err := k.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := make(map[int]int64, len(parts))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets of partition %d: %w", po.Partition, po.Error)
		}
		switch kind {
		case kafkago.LastOffset:
			out[po.Partition] = po.LastOffset
		case kafkago.FirstOffset:
			out[po.Partition] = po.FirstOffset
		default:
			out[po.Partition] = -1
			for off := range po.Offsets {
				out[po.Partition] = off
			}
		}
	}
	return out, nil
}

// read calls each with r's records in offset order.
func (k *KafkaReader) read(ctx context.Context, topic string, r partRange, each func(kafkago.Record)) error {
	for off := r.start; off < r.end; {
		res, err := k.client.Fetch(ctx, &kafkago.FetchRequest{
			Topic: topic, Partition: r.partition, Offset: off,
			MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 500 * time.Millisecond,
		})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return fmt.Errorf("fetch partition %d at offset %d: %w", r.partition, off, err)
		}
		next := off
		for {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				closeRecords(res.Records)
				return fmt.Errorf("fetch partition %d at offset %d: %w", r.partition, off, err)
			}
			if rec.Offset < off {
				continue // a batch may start before the offset asked for
			}
			if rec.Offset >= r.end {
				break
			}
			next = rec.Offset + 1
			each(*rec)
		}
		closeRecords(res.Records)
		if next == off {
			if res.HighWatermark <= off {
				return nil // the log ended (records deleted) before r.end
			}
			return fmt.Errorf("fetch partition %d at offset %d: no record returned below the high watermark %d", r.partition, off, res.HighWatermark)
		}
		off = next
	}
	return nil
}

// record counts rec's event_id header (when rec is of tl's table).
func (tl tally) record(rec kafkago.Record) {
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

func closeRecords(r kafkago.RecordReader) {
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
}
