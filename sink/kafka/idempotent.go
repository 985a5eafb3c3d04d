package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outboxd/outboxd/sink"
)

// The idempotent producer (KIP-98). Every record batch carries a producer id, an epoch and the
// sequence number of its first record; the broker keeps, per partition and producer, the last
// five batches' sequences, stores a batch only when it continues the sequence, and answers a
// batch it already stored with success without storing it again. So a batch whose answer was
// lost is resent here with the same id and sequence (the same bytes), and the broker keeps one
// copy.
//
// How this sink keeps the sequence exact:
//   - One batch per partition is in flight at a time (combiner.take holds a partition's later
//     batches until the earlier one is answered; they are merged into the next record batch).
//     The sink's requests still pipeline across partitions (maxRequestsPerBroker per broker).
//     So a partition's sequence advances only on success, and a batch the broker refused
//     without storing it (any other error, transient or permanent) leaves the sequence where it
//     was and is reported to the caller as before; the caller's resend takes that sequence.
//   - A batch not answered (a timeout, a broken connection) or answered with an error that
//     leaves open whether it was stored (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) is
//     resent as it is (same producer id, epoch and sequence) until the broker answers, the Sends
//     waiting for it gave up, or Timeout passed since its first attempt; each attempt gets at most half of
//     Timeout, so one batch's attempts together stay within Timeout (config.LongestSend, which
//     the HA lock's timing relies on).
//   - OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_EPOCH for a
//     partition's only batch in flight mean the broker did not store it and no longer holds the
//     sequence this sink expects (its producer state expired or was lost with a log truncation).
//     Kafka's Java producer then bumps its epoch and restarts the partition's sequence at 0
//     (KIP-360); here the partition takes a fresh producer id from InitProducerID (which every
//     broker version grants to a non-transactional producer) and restarts at 0. A fresh id per
//     partition needs no coordination with the other partitions' batches in flight, which an
//     epoch shared by all partitions would.
//   - A batch given up on with its outcome unknown (it may be stored) marks its partition: the
//     next batch there takes a fresh producer id first, because reusing the old sequence for
//     other records would let the broker take them for the stored copy and drop them. The
//     caller's resend of the given-up messages may then duplicate them, as without idempotence.

// lostSequence reports an answer that says the broker lost this producer's sequence for the
// partition; the batch is resealed under a fresh producer id and resent.
func lostSequence(err error) bool {
	return errors.Is(err, kafkago.OutOfOrderSequenceNumber) || errors.Is(err, kafkago.UnknownProducerId) ||
		errors.Is(err, kafkago.InvalidProducerEpoch)
}

// uncertain reports whether a partition's error leaves open whether its batch was stored: the
// leader appended it but the wait for its replicas ended first.
func uncertain(perr error) bool {
	return errors.Is(perr, kafkago.RequestTimedOut) || errors.Is(perr, kafkago.NotEnoughReplicasAfterAppend)
}

// partSeq is one partition's producer state. busy is guarded by combiner.mu; the other fields
// belong to the goroutine that set busy.
type partSeq struct {
	busy  bool
	id    int64 // producer id; -1: none yet (take the sink's shared one)
	epoch int16
	next  int32 // sequence of the next new batch's first record
}

// producerID returns the producer id and epoch the sink's partitions start with, asking the
// cluster once (InitProducerID) and caching the answer. It blocks for at most ctx and Timeout.
func (s *Sink) producerID(ctx context.Context) (int64, int16, error) {
	s.pidMu.Lock()
	defer s.pidMu.Unlock()
	if s.pidSet {
		return s.pid, s.pidEpoch, nil
	}
	id, epoch, err := s.initProducerID(ctx)
	if err != nil {
		return 0, 0, err
	}
	s.pid, s.pidEpoch, s.pidSet = id, epoch, true
	return id, epoch, nil
}

// initProducerID asks the cluster for a fresh non-transactional producer id. A refusal with
// CLUSTER_AUTHORIZATION_FAILED (no IDEMPOTENT_WRITE on the cluster, brokers before 2.8) names
// the setting that turns idempotence off.
func (s *Sink) initProducerID(ctx context.Context) (int64, int16, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	r, err := s.transport.RoundTrip(ctx, s.addr, &initproducerid.Request{TransactionTimeoutMs: -1})
	if err != nil {
		return 0, 0, fmt.Errorf("init producer id: %w", s.authError(err))
	}
	res, ok := r.(*initproducerid.Response)
	if !ok {
		return 0, 0, fmt.Errorf("init producer id: unexpected response %T", r)
	}
	if res.ErrorCode != 0 {
		err := kafkago.Error(res.ErrorCode)
		if errors.Is(err, kafkago.ClusterAuthorizationFailed) {
			// %v: transient for the pipeline, as a SASL failure (ErrAuth) is: no fault of the
			// messages, so never poison; the sink shows as down until the ACL or config changes.
			return 0, 0, &sink.FixError{
				Err: fmt.Errorf("init producer id: %v: the idempotent producer needs the IDEMPOTENT_WRITE permission on the cluster", err),
				Fix: fmt.Sprintf("grant IDEMPOTENT_WRITE on the cluster to this sink's principal, or set sinks.%s.idempotent: false", s.name),
			}
		}
		return 0, 0, fmt.Errorf("init producer id: %w", err)
	}
	return res.ProducerID, res.ProducerEpoch, nil
}

// seqBatch is one partition's record batch, encoded once and resent as the same bytes.
type seqBatch struct {
	group []*batchReq
	key   topicPartition
	ps    *partSeq
	data  []byte // the record set as on the wire: size prefix, then the v2 batch
	n     int32  // records
	// lastErr is the last transient error, reported when resending gives up.
	lastErr error
}

// Offsets in seqBatch.data: a 4-byte size, then the record batch v2 header.
const (
	rsCRC      = 4 + 17
	rsAttrs    = 4 + 21
	rsProducer = 4 + 43
	rsEpoch    = 4 + 51
	rsSequence = 4 + 53
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBatch encodes recs as one v2 record batch with kafka-go's writer, which leaves the
// producer fields unset (-1); stamp fills them in. kafka-go has no way to set them itself.
func encodeBatch(attributes protocol.Attributes, recs []kafkago.Record) ([]byte, error) {
	var buf bytes.Buffer
	rs := protocol.RecordSet{Version: 2, Attributes: attributes, Records: kafkago.NewRecordReader(recs...)}
	if _, err := rs.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// stamp writes the producer id, epoch and base sequence into an encoded batch and recomputes
// its CRC (which covers everything from the attributes on).
func stamp(data []byte, id int64, epoch int16, seq int32) {
	binary.BigEndian.PutUint64(data[rsProducer:], uint64(id))
	binary.BigEndian.PutUint16(data[rsEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(data[rsSequence:], uint32(seq))
	binary.BigEndian.PutUint32(data[rsCRC:], crc32.Checksum(data[rsAttrs:], castagnoli))
}

// nextSequence is seq advanced by n records, wrapping after MaxInt32 to 0 as the broker does.
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// Values of partSeq.id before the partition has an id of its own.
const (
	pidShared int64 = -1 // start with the sink's shared producer id
	pidFresh  int64 = -2 // the sequence is lost or uncertain: take a fresh producer id
)

// seal stamps b with its partition's producer id and next sequence, taking a producer id first
// when the partition has none (then its sequence starts at 0).
func (s *Sink) seal(ctx context.Context, b *seqBatch) error {
	if b.ps.id < 0 {
		get := s.producerID
		if b.ps.id == pidFresh {
			get = s.initProducerID
		}
		id, epoch, err := get(ctx)
		if err != nil {
			return err
		}
		b.ps.id, b.ps.epoch, b.ps.next = id, epoch, 0
	}
	stamp(b.data, b.ps.id, b.ps.epoch, b.ps.next)
	return nil
}

// sendIdempotent is combiner.send for an idempotent sink: it seals groups (one record batch
// each, every partition with no other batch in flight), sends them in one request, answers
// what the broker answered, frees q's slot, and resends the rest on their own (retry).
func (c *combiner) sendIdempotent(q *brokerQueue, groups [][]*batchReq) {
	first := time.Now()
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout/2)
	batches := make([]*seqBatch, 0, len(groups))
	attributes := protocol.Attributes(s.cfg.Compression) & 0x7
	recs, hdrs := recordSlabs(groups)
	for _, g := range groups {
		from := len(recs)
		recs, hdrs = appendRecords(recs, hdrs, g)
		k := topicPartition{g[0].topic, g[0].partition}
		b := &seqBatch{group: g, key: k, ps: c.partSeq(k), n: int32(len(recs) - from)}
		var err error
		if b.data, err = encodeBatch(attributes, recs[from:]); err == nil {
			err = s.seal(ctx, b)
		}
		if err != nil {
			c.finish(b, nil, err)
			continue
		}
		batches = append(batches, b)
	}
	var res map[topicPartition]*produceAPI.ResponsePartition
	var err error
	if len(batches) > 0 {
		res, err = s.produceRaw(ctx, batches)
	}
	cancel()
	for _, b := range batches {
		if again := c.answer(b, res, err, first); again {
			go c.retry(b, first)
		}
	}
	if q != nil {
		c.mu.Lock()
		q.inflight--
		c.kick(q)
		c.mu.Unlock()
	}
}

// answer applies the broker's answer (or the request's error) to b. It reports whether b is to
// be resent; otherwise b's Sends have their answer and its partition is free.
func (c *combiner) answer(b *seqBatch, res map[topicPartition]*produceAPI.ResponsePartition, err error, first time.Time) bool {
	rp, perr := partitionAnswer(res, err, b.key)
	switch {
	case perr == nil || errors.Is(perr, kafkago.DuplicateSequenceNumber):
		// Stored now or by an earlier attempt whose answer was lost.
		b.ps.next = nextSequence(b.ps.next, b.n)
		c.finish(b, rp, nil)
		return false
	case lostSequence(perr):
		// Not stored; the broker lost this producer's state for the partition.
		b.ps.id = pidFresh // retry reseals under a fresh id
		return true
	case rp != nil && !uncertain(perr):
		// Refused without storing anything: the sequence stays for the next batch, and the
		// caller decides about a resend as without idempotence.
		c.finish(b, rp, perr)
		return false
	}
	if staleMetadata(perr) {
		c.s.refresh(first, perr)
	}
	b.lastErr = perr
	return true
}

// retry resends b until answer settles it, every Send waiting for it gave up, the sink closed,
// or Timeout passed since first. Given up with the outcome unknown, b's partition takes a fresh
// producer id before its next batch.
func (c *combiner) retry(b *seqBatch, first time.Time) {
	s := c.s
	backoff := min(100*time.Millisecond, s.cfg.Timeout/20)
	for {
		left := s.cfg.Timeout - time.Since(first)
		if left <= backoff || s.closed.Load() || allGone(b.group) {
			b.ps.id = pidFresh
			err := b.lastErr
			if err == nil {
				err = errors.New("no answer")
			}
			c.finish(b, nil, fmt.Errorf("gave up resending after %v: %w", time.Since(first).Round(time.Millisecond), err))
			return
		}
		time.Sleep(backoff)
		ctx, cancel := context.WithTimeout(context.Background(), min(left-backoff, s.cfg.Timeout/2))
		var res map[topicPartition]*produceAPI.ResponsePartition
		var err error
		if b.ps.id == pidFresh {
			err = s.seal(ctx, b)
		}
		if err == nil {
			res, err = s.produceRaw(ctx, []*seqBatch{b})
		}
		cancel()
		if err != nil && b.ps.id == pidFresh {
			b.lastErr = err // the fresh id was not granted: try again
			continue
		}
		if !c.answer(b, res, err, first) {
			return
		}
	}
}

func allGone(group []*batchReq) bool {
	for _, r := range group {
		select {
		case <-r.gone:
		default:
			return false
		}
	}
	return true
}

// partSeq returns k's producer state, creating it. Called by the goroutine that owns k (busy).
func (c *combiner) partSeq(k topicPartition) *partSeq {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seqs[k]
}

// finish answers b's Sends (see answerGroup) and frees its partition for the next batch.
func (c *combiner) finish(b *seqBatch, rp *produceAPI.ResponsePartition, perr error) {
	answerGroup(b.group, rp, perr)
	c.mu.Lock()
	b.ps.busy = false
	for _, q := range c.brokers {
		c.kick(q)
	}
	c.mu.Unlock()
}

// produceRaw sends batches in one produce request with acks=all and blocks until the broker
// answered or ctx ended, like produce.
func (s *Sink) produceRaw(ctx context.Context, batches []*seqBatch) (map[topicPartition]*produceAPI.ResponsePartition, error) {
	req := &rawproduce.Request{Acks: int16(kafkago.RequireAll), Timeout: brokerWaitMs(ctx, s.cfg.Timeout)}
	for _, b := range batches {
		part := rawproduce.RequestPartition{
			Partition: int32(b.key.partition),
			RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(b.data)},
		}
		if n := len(req.Topics); n > 0 && req.Topics[n-1].Topic == b.key.topic {
			req.Topics[n-1].Partitions = append(req.Topics[n-1].Partitions, part)
		} else {
			req.Topics = append(req.Topics, rawproduce.RequestTopic{Topic: b.key.topic, Partitions: []rawproduce.RequestPartition{part}})
		}
	}
	return s.roundTripProduce(ctx, req, len(batches))
}
