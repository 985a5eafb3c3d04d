package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
// How this sink keeps the sequence exact (Kafka's Java producer is the model):
//   - A partition's sequence is assigned when its batch is taken into a request (take, under
//     the combiner's lock), and a partition has one batch unanswered at a time
//     (maxInFlightPerPartition). The sink still pipelines: a broker has up to
//     maxRequestsPerBroker requests in flight, each taking a share of the partitions ready to
//     send (spread), so the broker stores one while the next is built.
//   - A batch not answered (a timeout, a broken connection) or answered with an error that
//     leaves open whether it was stored (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) is
//     resent as it is (same producer id, epoch and sequence) until the broker answers, the Sends
//     waiting for it gave up, or Timeout passed since the earliest of its Sends began (no
//     attempt, the first included, is written later); each attempt gets at most half of
//     Timeout, so a Send's writes stay within Timeout of its start (config.LongestSend, which
//     the HA lock's timing relies on).
//   - OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_EPOCH for the
//     partition's batch that continues what was stored mean the broker lost the producer's
//     state (its records expired, a log was truncated); the batch was not stored. Kafka's
//     producer bumps its epoch and restarts the sequence at 0 (KIP-360); here the partition
//     takes a fresh producer id (InitProducerID grants one to any non-transactional producer on
//     every broker version, without coordination with the other partitions' batches in flight)
//     and the batch is resent as sequence 0.
//   - A batch refused without being stored (any other error, transient or permanent) is
//     reported to its Sends as before, and the partition's next batch takes its sequence;
//     unless an earlier attempt of it went unanswered or uncertain. The refusal then speaks
//     for that resend only: the earlier attempt may be stored (its answer lost), and a next
//     batch with its sequence and as many records would be answered as that stored copy's
//     duplicate and dropped. So the batch counts as given up with its outcome unknown (below).
//   - A batch given up on with its outcome unknown (it may be stored) marks its partition: its
//     next batch takes a fresh producer id, because reusing the sequence for other records
//     would let the broker take them for the stored copy and drop them. The caller's resend of
//     the given-up messages may then duplicate them, as without idempotence.
//
// Why one batch per partition in flight and not Kafka's five: kafka-go's Transport spreads
// concurrent requests to one broker over several connections, so the broker sees them out of
// order. With five per partition, 60% of the batches in BenchmarkSendSinkIdempotent came back
// OUT_OF_ORDER_SEQUENCE_NUMBER and had to be resent (15k events/s against 280k); with one per
// partition and the partitions spread over the requests, none do and the sink is as fast as
// without idempotence (BENCH.md). More than one per partition would need a transport that
// keeps a broker's requests in order (one pipelined connection, as Kafka's producer has); the
// window below is written for that, but only one is tested.
//
// Sequences are counted here as int64 from 0 per producer id; on the wire they wrap after
// MaxInt32 to 0, as the broker expects.

// maxInFlightPerPartition bounds a partition's unanswered batches: one, see above (Kafka's own
// bound is five, the broker recognising a resent batch among its last five).
const maxInFlightPerPartition = 1

// lostSequence reports an answer that says the broker does not continue this producer's
// sequence for the partition with this batch; the batch was not stored.
func lostSequence(err error) bool {
	return errors.Is(err, kafkago.OutOfOrderSequenceNumber) || errors.Is(err, kafkago.UnknownProducerId) ||
		errors.Is(err, kafkago.InvalidProducerEpoch)
}

// uncertain reports whether a partition's error leaves open whether its batch was stored: the
// leader appended it but the wait for its replicas ended first.
func uncertain(perr error) bool {
	return errors.Is(perr, kafkago.RequestTimedOut) || errors.Is(perr, kafkago.NotEnoughReplicasAfterAppend)
}

// Values of partSeq.id before the partition has an id of its own.
const (
	pidShared int64 = -1 // start with the sink's shared producer id
	pidFresh  int64 = -2 // take a fresh producer id
)

// partSeq is one partition's producer state, guarded by combiner.mu.
type partSeq struct {
	id    int64 // producer id, or pidShared / pidFresh until the first batch has one
	epoch int16
	next  int64 // sequence of the next new batch
	acked int64 // sequence after the last batch stored: what the broker expects next
	// window is the batches from the oldest unfinished one on, in sequence order: a batch
	// finished behind an unfinished one stays until that one finishes, so a resent batch is
	// always among the broker's last maxInFlightPerPartition of this producer.
	window []*seqBatch
	// rewind: a batch was refused without being stored; restart at acked once none is in
	// flight. fresh: a batch's outcome stayed unknown or the broker lost the producer's state;
	// take a fresh producer id once none is in flight.
	rewind, fresh bool
}

// admits reports whether partition k may have one more batch taken now, settling a rewind or a
// fresh start first when nothing is in flight. Holding mu.
func (c *combiner) admits(k topicPartition) bool {
	ps := c.seqs[k]
	if ps == nil {
		ps = &partSeq{id: pidShared}
		c.seqs[k] = ps
	}
	if len(ps.window) > 0 {
		// The first batch under a new producer id goes alone: it takes the id.
		return !ps.rewind && !ps.fresh && ps.id >= 0 && len(ps.window) < maxInFlightPerPartition
	}
	switch {
	case ps.fresh:
		ps.id, ps.next, ps.acked = pidFresh, 0, 0
	case ps.rewind:
		ps.next = ps.acked
	}
	ps.rewind, ps.fresh = false, false
	return true
}

// sequence gives each group, one partition's record batch, the next sequence of its partition.
// Holding mu.
func (c *combiner) sequence(groups [][]*batchReq) []*seqBatch {
	out := make([]*seqBatch, len(groups))
	for i, g := range groups {
		k := topicPartition{g[0].topic, g[0].partition}
		n := 0
		for _, r := range g {
			n += len(r.idx)
		}
		ps := c.seqs[k]
		b := &seqBatch{group: g, key: k, ps: ps, seq: ps.next, n: int32(n), deadline: earliest(g)}
		ps.next += int64(n)
		ps.window = append(ps.window, b)
		out[i] = b
	}
	return out
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
	seq   int64  // its first record's sequence
	n     int32  // records
	data  []byte // the record set as on the wire: size prefix, then the v2 batch
	// lastErr is the last error of an attempt, reported when resending gives up.
	lastErr error
	// reseal: resend under a fresh producer id as sequence 0; it belongs to the goroutine
	// sending b.
	reseal bool
	// unknown: an attempt under b's current producer id went unanswered or was answered
	// uncertain, so the broker may hold b even when a resend is refused. Guarded by mu.
	unknown  bool
	finished bool // guarded by combiner.mu
	// deadline: no attempt is written after it, its batchReqs' earliest (batchReq.deadline).
	deadline time.Time
	// leaked: an attempt ended without the broker's answer (a timeout, a broken connection),
	// so a connection may still be reading data; it is then never recycled (putBuf).
	leaked bool
}

// unfinished counts the batches of the window not finished. Holding mu.
func (ps *partSeq) unfinished() int {
	n := 0
	for _, b := range ps.window {
		if !b.finished {
			n++
		}
	}
	return n
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

// encodeBatch encodes the records of group's batchReqs, in order, as one v2 record batch
// preceded by its 4-byte size, as a produce request carries it, with the producer fields left
// for stamp. kafka-go's batch writer writes them as -1 and cannot be told otherwise, so the
// batch is written here, compressed with kafka-go's codecs. It reads each message once, in one
// pass, into a buffer of encodedBound bytes.
func encodeBatch(codec kafkago.Compression, group []*batchReq, now time.Time) ([]byte, error) {
	size := encodedBound(group)
	buf := getBuf(4+batchOverhead, size)
	clear(buf) // the header: a recycled buffer holds an earlier batch's
	var recs []byte
	var body *bytes.Buffer
	if codec == 0 {
		recs = buf
	} else {
		recs = getBuf(0, size)
		defer putBuf(recs)
	}
	first, maxTS := int64(-1), int64(0)
	n := 0 // records so far: the next one's offset delta
	for _, r := range group {
		for _, i := range r.idx {
			m := r.msgs[i]
			ts := timestampOf(m, now)
			if first < 0 {
				first = ts
			}
			maxTS = max(maxTS, ts)
			d := ts - first
			recs = binary.AppendVarint(recs, int64(recordBodySize(m, &d, n)))
			recs = append(recs, 0) // record attributes
			recs = binary.AppendVarint(recs, d)
			recs = binary.AppendVarint(recs, int64(n))
			recs = appendNullBytes(recs, m.Key)
			recs = appendNullBytes(recs, m.Value)
			recs = binary.AppendVarint(recs, int64(len(m.Headers)))
			for _, h := range m.Headers {
				recs = binary.AppendVarint(recs, int64(len(h.Key)))
				recs = append(recs, h.Key...)
				recs = appendNullBytes(recs, h.Value)
			}
			n++
		}
	}
	if codec == 0 {
		buf = recs
	} else {
		body = bytes.NewBuffer(buf)
		w := codec.Codec().NewWriter(body)
		if _, err := w.Write(recs); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		buf = body.Bytes()
	}
	be := binary.BigEndian
	be.PutUint32(buf[0:], uint32(len(buf)-4))      // record set size
	be.PutUint64(buf[4:], 0)                       // base offset
	be.PutUint32(buf[4+8:], uint32(len(buf)-4-12)) // batch length
	be.PutUint32(buf[4+12:], 0xffffffff)           // partition leader epoch: -1
	buf[4+16] = 2                                  // magic
	be.PutUint16(buf[rsAttrs:], uint16(codec)&0x7) // attributes: the codec
	be.PutUint32(buf[4+23:], uint32(n-1))          // last offset delta
	be.PutUint64(buf[4+27:], uint64(first))        // first timestamp
	be.PutUint64(buf[4+35:], uint64(maxTS))        // max timestamp
	be.PutUint32(buf[4+57:], uint32(n))            // records
	return buf, nil
}

// encodedBound bounds the uncompressed size of group's record batch with its 4-byte size: the
// batchReqs' sizes (batchBytes, which take every timestamp at its longest) plus 3 bytes a record
// for the offset deltas and length prefixes that grow when batchReqs merge (an offset below 2^19
// takes at most 2 bytes more than the record's offset in its own batchReq, and its length prefix
// at most 1 more). A batch that outgrew it would still be encoded right, by append.
func encodedBound(group []*batchReq) int {
	size := 4 + batchOverhead
	for _, r := range group {
		size += r.size - batchOverhead + 3*len(r.idx)
	}
	return size
}

// timestampOf is m's record time in milliseconds; a zero Time is now, as kafka-go stamps it.
func timestampOf(m *sink.Message, now time.Time) int64 {
	if m.Time.IsZero() {
		return now.UnixMilli()
	}
	return m.Time.UnixMilli()
}

func appendNullBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

// stamp writes the producer id, epoch and base sequence into an encoded batch and recomputes
// its CRC (which covers everything from the attributes on).
func stamp(data []byte, id int64, epoch int16, seq int64) {
	binary.BigEndian.PutUint64(data[rsProducer:], uint64(id))
	binary.BigEndian.PutUint16(data[rsEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(data[rsSequence:], uint32(seq%(1<<31))) // after MaxInt32 comes 0
	binary.BigEndian.PutUint32(data[rsCRC:], crc32.Checksum(data[rsAttrs:], castagnoli))
}

// sendIdempotent is combiner.send for an idempotent sink: it encodes and stamps batches (taking
// a producer id first where a partition has none), sends them in one request, settles what the
// broker answered, frees q's slot, and resends the rest on their own (retry).
func (c *combiner) sendIdempotent(q *brokerQueue, batches []*seqBatch) {
	first := time.Now()
	s := c.s
	deadline := first.Add(s.cfg.Timeout / 2)
	for _, b := range batches {
		deadline = minTime(deadline, b.deadline)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	now := time.Now()
	ready := batches[:0:0]
	for _, b := range batches {
		var err error
		if b.data, err = encodeBatch(s.cfg.Compression, b.group, now); err == nil {
			err = c.seal(ctx, b)
		}
		if err != nil {
			c.mu.Lock()
			b.ps.rewind = true // nothing sent: its sequence is free again
			c.mu.Unlock()
			c.finish(b, nil, err)
			continue
		}
		ready = append(ready, b)
	}
	var res map[topicPartition]*produceAPI.ResponsePartition
	var err error
	if len(ready) > 0 {
		res, err = s.produceRaw(ctx, ready)
	}
	cancel()
	for _, b := range ready {
		if c.answer(b, res, err, first) {
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

// seal stamps b with its partition's producer id and b's sequence. A partition without an id
// (then b is its only batch in flight, as sequence 0) takes the sink's shared one, or a fresh
// one after a lost or uncertain sequence.
func (c *combiner) seal(ctx context.Context, b *seqBatch) error {
	c.mu.Lock()
	id, epoch := b.ps.id, b.ps.epoch
	c.mu.Unlock()
	if id < 0 {
		get := c.s.producerID
		if id == pidFresh {
			get = c.s.initProducerID
		}
		var err error
		if id, epoch, err = get(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		b.ps.id, b.ps.epoch = id, epoch
		c.mu.Unlock()
	}
	stamp(b.data, id, epoch, b.seq)
	return nil
}

// answer settles b by the broker's answer (or the request's error). It reports whether b is to
// be resent; otherwise b's Sends have their answer.
func (c *combiner) answer(b *seqBatch, res map[topicPartition]*produceAPI.ResponsePartition, err error, first time.Time) (again bool) {
	rp, perr := partitionAnswer(res, err, b.key)
	if err != nil {
		b.leaked = true
	}
	c.mu.Lock()
	ps := b.ps
	switch {
	case perr == nil || errors.Is(perr, kafkago.DuplicateSequenceNumber):
		// Stored now, or by an earlier attempt whose answer was lost.
		ps.acked = max(ps.acked, b.seq+int64(b.n))
		c.mu.Unlock()
		c.finish(b, rp, nil)
		return false
	case lostSequence(perr):
		switch {
		case b.seq == ps.acked && ps.unfinished() == 1:
			// The broker lost this producer's state: resend under a fresh id from 0.
			ps.id, b.reseal = pidFresh, true
			b.lastErr = perr
			c.mu.Unlock()
			return true
		case b.seq == ps.acked:
			ps.fresh = true
		}
		// An earlier batch was refused or given up: this one was not stored either.
		c.mu.Unlock()
		c.finish(b, nil, fmt.Errorf("%v: %w", perr, errNotSent))
		return false
	case rp != nil && !uncertain(perr):
		// Refused without being stored; the batches behind it cannot be stored either. After
		// an unknown attempt the refusal is the resend's only: b may be stored, its sequence
		// is not free, and the partition takes a fresh producer id as after a give-up.
		if b.unknown {
			ps.fresh = true
		} else {
			ps.rewind = true
		}
		c.mu.Unlock()
		c.finish(b, rp, perr)
		return false
	}
	b.unknown = true
	c.mu.Unlock()
	if staleMetadata(perr) {
		c.s.refresh(first, perr)
	}
	b.lastErr = perr
	return true
}

// retry resends b until answer settles it, every Send waiting for it gave up, the sink closed,
// or b's deadline passed (Timeout after the earliest of its Sends began). Given up with the
// outcome unknown, b's partition takes a fresh producer id once nothing of it is in flight.
//
// The bound is that deadline, checked after each backoff and carried to the
// connection (kafka-go sets the socket's deadline from the context's): a process paused past
// it (SIGSTOP, a stalled VM) sends nothing when it resumes. The HA lock's timing counts on a
// deposed leader's sends ending within LongestSend; a timeout measured from the resume, as
// before, let a leader frozen past its lease resend after the next leader's first produce.
func (c *combiner) retry(b *seqBatch, first time.Time) {
	s := c.s
	backoff := min(100*time.Millisecond, s.cfg.Timeout/20)
	deadline := b.deadline
	for {
		c.pause(backoff)
		if !time.Now().Before(deadline) || s.closed.Load() || allGone(b.group) {
			c.mu.Lock()
			b.ps.fresh = true
			c.mu.Unlock()
			c.finish(b, nil, fmt.Errorf("gave up resending after %v: %w", time.Since(first).Round(time.Millisecond), b.lastErr))
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), minTime(deadline, time.Now().Add(s.cfg.Timeout/2)))
		var res map[topicPartition]*produceAPI.ResponsePartition
		var err error
		if b.reseal {
			var id int64
			var epoch int16
			if id, epoch, err = s.initProducerID(ctx); err == nil {
				c.mu.Lock()
				b.ps.id, b.ps.epoch, b.ps.next, b.ps.acked = id, epoch, int64(b.n), 0
				b.unknown = false // nothing sent under the fresh id yet
				c.mu.Unlock()
				b.seq, b.reseal = 0, false
				stamp(b.data, id, epoch, 0)
			}
		}
		if err == nil {
			res, err = s.produceRaw(ctx, []*seqBatch{b})
		} else {
			b.lastErr = err // no fresh id yet: try again
			cancel()
			continue
		}
		cancel()
		if !c.answer(b, res, err, first) {
			return
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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

// finish answers b's Sends (see answerGroup), moves its partition's window past the finished
// batches at its front and starts the requests that waited for that.
func (c *combiner) finish(b *seqBatch, rp *produceAPI.ResponsePartition, perr error) {
	answerGroup(b.group, rp, perr)
	if b.data != nil && !b.leaked {
		putBuf(b.data)
	}
	b.data = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	b.finished = true
	ps := b.ps
	for len(ps.window) > 0 && ps.window[0].finished {
		ps.window[0] = nil
		ps.window = ps.window[1:]
	}
	for _, q := range c.brokers {
		c.kick(q)
	}
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

// spread is how many partitions the next request to q's broker takes at most: the partitions
// that may send now, split evenly over the free request slots. With one batch per partition in
// flight, a request taking every partition would leave the other slots idle until it is
// answered; split, the broker works on one request while the next is built. Holding mu.
func (c *combiner) spread(q *brokerQueue) int {
	ready := make(map[topicPartition]bool)
	for _, r := range q.pending {
		k := topicPartition{r.topic, r.partition}
		if _, seen := ready[k]; !seen {
			ready[k] = c.admits(k)
		}
	}
	n := 0
	for _, ok := range ready {
		if ok {
			n++
		}
	}
	free := max(1, maxRequestsPerBroker-q.inflight)
	return max(1, (n+free-1)/free)
}
