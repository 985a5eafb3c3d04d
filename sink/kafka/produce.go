package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/outboxd/outboxd/sink"
)

// maxRequestBytes caps the record batches one produce request carries; a leader's partitions
// beyond it go in further requests. Far below the broker's socket.request.max.bytes (100 MiB).
const maxRequestBytes = 16 << 20

// byLeader groups a Send's partition batches by the broker that leads them, keeping their
// order. A partition without a known leader gets a group of its own, so its routing error fails
// only its own messages.
func byLeader(batches []*partBatch) [][]*partBatch {
	var groups [][]*partBatch
	at := make(map[int]int) // leader id -> index in groups
	for _, b := range batches {
		if b.leader < 0 {
			groups = append(groups, []*partBatch{b})
			continue
		}
		g, ok := at[b.leader]
		if !ok {
			g = len(groups)
			at[b.leader] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], b)
	}
	return groups
}

// partSend is one partition's progress through a Send: its record batches (chunks of at most
// MaxMessageBytes) and the next one to send.
type partSend struct {
	*partBatch
	queue [][]int
	next  int
}

// sendLeader sends the partition batches one broker leads, writing the failures into errs
// (each index is written by one goroutine only). Each round sends every unfinished partition's
// next record batch in one produce request (more only past maxRequestBytes), so a Send costs one
// round trip per broker instead of one per partition. A partition's next batch goes out only
// after the broker acknowledged its previous one, and its first failure ends it: later batches
// are not sent. Partitions of one request succeed or fail on their own, as the broker appends
// each partition's batch independently.
func (s *Sink) sendLeader(ctx context.Context, start time.Time, msgs []*sink.Message, group []*partBatch, errs []error) {
	parts := make([]*partSend, len(group))
	for i, b := range group {
		parts[i] = &partSend{partBatch: b, queue: chunk(msgs, b.idx, s.cfg.MaxMessageBytes)}
	}
	for {
		active := parts[:0:0]
		for _, p := range parts {
			if p.next < len(p.queue) {
				active = append(active, p)
			}
		}
		if len(active) == 0 {
			return
		}
		if err := ctx.Err(); err != nil {
			for _, p := range active {
				p.failRest(errs, p.next, fmt.Errorf("topic %s partition %d: %w", p.topic, p.partition, err))
			}
			return
		}
		for len(active) > 0 {
			n, size := 0, 0
			for n < len(active) && (n == 0 || size+batchBytes(msgs, active[n].queue[active[n].next]) <= maxRequestBytes) {
				size += batchBytes(msgs, active[n].queue[active[n].next])
				n++
			}
			s.sendRound(ctx, start, msgs, active[:n], errs)
			active = active[n:]
		}
	}
}

// batchBytes estimates the encoded size of one record batch of msgs[idx] (timestamps at their
// longest), for packing requests.
func batchBytes(msgs []*sink.Message, idx []int) int {
	n := batchOverhead
	for k, i := range idx {
		n += recordSize(msgs[i], nil, k)
	}
	return n
}

// sendRound sends the next record batch of each of parts in one produce request and applies
// each partition's answer: on success the partition moves to its next batch; on failure its
// messages get the error and the rest of the partition is not sent.
func (s *Sink) sendRound(ctx context.Context, start time.Time, msgs []*sink.Message, parts []*partSend, errs []error) {
	res, err := s.produce(ctx, msgs, parts)
	for _, p := range parts {
		c := p.queue[p.next]
		perr := err
		var recErrs []produceAPI.ResponseError
		if perr == nil {
			rp := res[topicPartition{p.topic, p.partition}]
			switch {
			case rp == nil:
				perr = fmt.Errorf("the broker's produce response has no answer for the partition: %w", protocol.ErrNoPartition)
			case rp.ErrorCode != 0:
				perr = kafkago.Error(rp.ErrorCode)
				if rp.ErrorMessage != "" {
					perr = fmt.Errorf("%w: %s", perr, rp.ErrorMessage)
				}
				recErrs = rp.RecordErrors
			}
		}
		if perr == nil {
			p.next++
			continue
		}
		if staleMetadata(perr) && ctx.Err() == nil {
			s.refresh(start, perr)
		}
		// The broker rejects an oversized batch before appending anything, so sending its
		// messages one by one is safe; it happens when the broker's message.max.bytes is below
		// MaxMessageBytes, and each message then gets its own verdict.
		if errors.Is(perr, kafkago.MessageSizeTooLarge) && len(c) > 1 {
			singles := make([][]int, 0, len(c)+len(p.queue)-p.next-1)
			for _, i := range c {
				singles = append(singles, []int{i})
			}
			p.queue = append(singles, p.queue[p.next+1:]...)
			p.next = 0
			continue
		}
		wrapped := classify(fmt.Errorf("produce to topic %s partition %d: %w", p.topic, p.partition, perr))
		if len(recErrs) > 0 {
			// Per-record errors reject the whole batch; only the named records are bad, the
			// others are merely not stored and can be resent as they are. %v, not %w: the
			// batch's error must not make them permanent.
			bad := make(map[int]string, len(recErrs))
			for _, re := range recErrs {
				bad[int(re.BatchIndex)] = re.BatchIndexErrorMessage
			}
			for k, i := range c {
				if msg, ok := bad[k]; ok {
					errs[i] = classify(fmt.Errorf("produce to topic %s partition %d: %w: record %d: %v", p.topic, p.partition, perr, k, errors.New(msg)))
				} else {
					errs[i] = fmt.Errorf("produce to topic %s partition %d: batch rejected for another record (%v): %w", p.topic, p.partition, perr, errNotSent)
				}
			}
		} else {
			for _, i := range c {
				errs[i] = wrapped
			}
		}
		p.failRest(errs, p.next+1, fmt.Errorf("topic %s partition %d: an earlier batch failed (%v): %w", p.topic, p.partition, perr, errNotSent))
		p.next = len(p.queue)
	}
}

// failRest gives err to the messages of the partition's batches from index from on that have
// no error yet.
func (p *partSend) failRest(errs []error, from int, err error) {
	for _, c := range p.queue[from:] {
		for _, i := range c {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
}

type topicPartition struct {
	topic     string
	partition int
}

// produce sends the next record batch of every one of parts in one produce request with
// acks=all, and blocks until the broker answered, Timeout passed or ctx ended. It returns each
// partition's answer, or the error that failed the whole request.
func (s *Sink) produce(ctx context.Context, msgs []*sink.Message, parts []*partSend) (map[topicPartition]*produceAPI.ResponsePartition, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	attributes := protocol.Attributes(s.cfg.Compression) & 0x7
	req := &produceAPI.Request{
		Acks:    int16(kafkago.RequireAll),
		Timeout: brokerWaitMs(ctx, s.cfg.Timeout),
	}
	nrec, nhdr := 0, 0
	for _, p := range parts {
		for _, i := range p.queue[p.next] {
			nrec++
			nhdr += len(msgs[i].Headers)
		}
	}
	// One slab each for the records and their headers of the whole request.
	recs := make([]kafkago.Record, 0, nrec)
	hdrs := make([]kafkago.Header, 0, nhdr)
	for _, p := range parts {
		from := len(recs)
		for _, i := range p.queue[p.next] {
			m := msgs[i]
			var hs []kafkago.Header
			if len(m.Headers) > 0 {
				h0 := len(hdrs)
				for _, h := range m.Headers {
					hdrs = append(hdrs, kafkago.Header{Key: h.Key, Value: h.Value})
				}
				hs = hdrs[h0:len(hdrs):len(hdrs)]
			}
			recs = append(recs, kafkago.Record{
				Time:    m.Time, // zero: kafka-go stamps the encoding time
				Key:     kafkago.NewBytes(m.Key),
				Value:   kafkago.NewBytes(m.Value),
				Headers: hs,
			})
		}
		part := produceAPI.RequestPartition{
			Partition: int32(p.partition),
			RecordSet: protocol.RecordSet{Attributes: attributes, Records: kafkago.NewRecordReader(recs[from:]...)},
		}
		if n := len(req.Topics); n > 0 && req.Topics[n-1].Topic == p.topic {
			req.Topics[n-1].Partitions = append(req.Topics[n-1].Partitions, part)
		} else {
			req.Topics = append(req.Topics, produceAPI.RequestTopic{Topic: p.topic, Partitions: []produceAPI.RequestPartition{part}})
		}
	}
	r, err := s.transport.RoundTrip(ctx, s.addr, req)
	if err != nil {
		return nil, fmt.Errorf("kafka produce: %w", err)
	}
	res, ok := r.(*produceAPI.Response)
	if !ok {
		return nil, fmt.Errorf("kafka produce: unexpected response %T", r)
	}
	out := make(map[topicPartition]*produceAPI.ResponsePartition, len(parts))
	for ti := range res.Topics {
		t := &res.Topics[ti]
		for pi := range t.Partitions {
			out[topicPartition{t.Topic, int(t.Partitions[pi].Partition)}] = &t.Partitions[pi]
		}
	}
	return out, nil
}

// brokerWaitMs is the acks=all wait asked of the broker: half of what is left of timeout (or of
// ctx), leaving the rest for the network, as kafka-go's Client does.
func brokerWaitMs(ctx context.Context, timeout time.Duration) int32 {
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	return int32(max(timeout/2, time.Millisecond) / time.Millisecond)
}
