package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/outboxd/outboxd/sink"
)

const (
	// maxRequestBytes caps the record batches one produce request carries; what is left waits
	// for the next request. Far below the broker's socket.request.max.bytes (100 MiB).
	maxRequestBytes = 4 << 20
	// maxRequestsPerBroker bounds the produce requests in flight to one broker across all the
	// Sends running at once. What the Sends hand over while they are all busy goes out together
	// in the next request, a partition's batches from several Sends merged into one record
	// batch: franz-go's model (one request per broker carrying every partition ready). Without
	// it the pipeline's 16 lanes each sent their own small request (~8 records in a 1-row
	// catch-up), and the per-request work dominated both outboxd's CPU and the broker's.
	maxRequestsPerBroker = 4
)

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
	// alone: the next chunk must go in a record batch of its own, not merged with other Sends'
	// (it was refused as too large while merged).
	alone bool
}

// sendLeader sends the partition batches one broker leads, writing the failures into errs
// (each index is written by one goroutine only). Each round hands every unfinished partition's
// next record batch to the broker's combiner and waits for their answers. A partition's next
// batch goes out only after the broker acknowledged its previous one, and its first failure
// ends it: later batches are not sent. Partitions succeed or fail on their own, as the broker
// appends each partition's batch independently.
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
		s.sendRound(ctx, start, msgs, active, errs)
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

// sendRound sends the next record batch of each of parts and applies each partition's answer:
// on success the partition moves to its next batch; on failure its messages get the error and
// the rest of the partition is not sent.
func (s *Sink) sendRound(ctx context.Context, start time.Time, msgs []*sink.Message, parts []*partSend, errs []error) {
	reqs := make([]*batchReq, len(parts))
	for k, p := range parts {
		c := p.queue[p.next]
		reqs[k] = &batchReq{topic: p.topic, partition: p.partition, leader: p.leader, msgs: msgs, idx: c,
			size: batchBytes(msgs, c), alone: p.alone, gone: ctx.Done(), deadline: start.Add(s.cfg.Timeout), done: make(chan batchResult, 1)}
	}
	s.combine.submit(reqs)
	for k, p := range parts {
		c := p.queue[p.next]
		var res batchResult
		select {
		case res = <-reqs[k].done:
		case <-ctx.Done():
			// Not yet answered: withdraw what was not sent yet; what is in flight may still be
			// stored, like any unacknowledged send.
			s.combine.withdraw(reqs[k:])
			for _, p := range parts[k:] {
				p.failRest(errs, p.next, fmt.Errorf("topic %s partition %d: %w", p.topic, p.partition, ctx.Err()))
				p.next = len(p.queue)
			}
			return
		}
		perr := res.err
		if perr == nil {
			p.next++
			p.alone = false
			continue
		}
		if staleMetadata(perr) && ctx.Err() == nil {
			s.refresh(start, perr)
		}
		if res.merged && !res.recordErrors && sink.IsPermanent(classify(perr)) {
			// A batch-level refusal of a batch merged with other Sends' records (too large,
			// larger than segment.bytes, a bad record of another Send without per-record
			// errors) says nothing certain about this Send's records: resend them on their own.
			p.alone = true
			continue
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
		if res.recordErrors {
			// Per-record errors reject the whole batch; only the named records are bad, the
			// others are merely not stored and can be resent as they are. %v, not %w: the
			// batch's error must not make them permanent.
			for k, i := range c {
				if msg, ok := res.badRecords[k]; ok {
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

// batchReq is one Send's record batch for one partition, handed to the combiner.
type batchReq struct {
	topic     string
	partition int
	leader    int
	msgs      []*sink.Message
	idx       []int // the records, indexes into msgs, in order
	size      int   // batchBytes of them
	alone     bool  // never merged with another batchReq
	// gone is closed when the Send gave up (its ctx's Done): a batch not yet taken into a
	// request then never goes out, so nothing is written for a Send after it ended (a fenced
	// leader's sends end within the request timeout, see the HA contract).
	gone <-chan struct{}
	// deadline is its Send's start plus Timeout: nothing of it is written after that. The HA
	// lock's timing counts on a leader's sends ending within LongestSend of the Send that the
	// lock's guard let start; a batch still waiting for a request slot when the process was
	// frozen (SIGSTOP, a stalled VM) past its lease went out when it resumed, before its Send's
	// ctx could end (chaos: 2 produces of a deposed leader 2 s into the next one's term).
	deadline time.Time
	done     chan batchResult
}

// earliest is the earliest deadline of g's batchReqs.
func earliest(g []*batchReq) time.Time {
	d := g[0].deadline
	for _, r := range g[1:] {
		d = minTime(d, r.deadline)
	}
	return d
}

// batchResult is the broker's answer for one batchReq.
type batchResult struct {
	err error // nil: acknowledged
	// recordErrors: the broker rejected the batch for some of its records (per-record errors);
	// badRecords names this batchReq's own (by index into idx), if any.
	recordErrors bool
	badRecords   map[int]string
	// merged: the record batch held other Sends' records too.
	merged bool
}

// combiner turns the batchReqs of the Sends running at once into few produce requests: at most
// maxRequestsPerBroker in flight per broker, each carrying everything pending for that broker
// when it goes out. Safe for concurrent use.
type combiner struct {
	s       *Sink
	mu      sync.Mutex
	brokers map[int]*brokerQueue
	// seqs is each partition's idempotent producer state (idempotent.go), nil without it.
	seqs map[topicPartition]*partSeq
	// pause waits between a batch's attempts: time.Sleep; a test stands in a process paused
	// longer.
	pause func(time.Duration)
	// now is time.Now; a test stands in a process frozen between a Send's start and the taking
	// of its batches into a request (take).
	now func() time.Time
}

type brokerQueue struct {
	inflight int
	pending  []*batchReq // in submission order
}

// submit queues reqs and starts requests as far as the per-broker bound allows. It does not
// block on the network; each req's answer arrives on its done channel.
func (c *combiner) submit(reqs []*batchReq) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.brokers == nil {
		c.brokers = make(map[int]*brokerQueue)
		if c.s.cfg.Idempotent {
			c.seqs = make(map[topicPartition]*partSeq)
		}
	}
	for _, r := range reqs {
		if r.leader < 0 && c.s.cfg.Idempotent {
			// Not sent: a batch is stamped only when its partition's order is ours to keep.
			r.done <- batchResult{err: fmt.Errorf("topic %s partition %d has no leader in the cached metadata: %w", r.topic, r.partition, kafkago.LeaderNotAvailable)}
			continue
		}
		if r.leader < 0 {
			// No known leader: kafka-go routes it (and fails it) on its own request.
			go c.send(nil, [][]*batchReq{{r}})
			continue
		}
		q := c.brokers[r.leader]
		if q == nil {
			q = &brokerQueue{}
			c.brokers[r.leader] = q
		}
		q.pending = append(q.pending, r)
	}
	for _, q := range c.brokers {
		c.kick(q)
	}
}

// withdraw removes the reqs that are still pending (their Send gave up waiting).
func (c *combiner) withdraw(reqs []*batchReq) {
	gone := make(map[*batchReq]bool, len(reqs))
	for _, r := range reqs {
		gone[r] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.brokers {
		kept := q.pending[:0]
		for _, r := range q.pending {
			if !gone[r] {
				kept = append(kept, r)
			}
		}
		clear(q.pending[len(kept):])
		q.pending = kept
	}
}

// kick starts requests for q while it has pending batches and room in flight. Holding mu.
func (c *combiner) kick(q *brokerQueue) {
	for q.inflight < maxRequestsPerBroker && len(q.pending) > 0 {
		groups := c.take(q)
		if len(groups) == 0 {
			break // everything pending belonged to Sends that gave up
		}
		q.inflight++
		if c.seqs != nil {
			go c.sendIdempotent(q, c.sequence(groups))
			continue
		}
		go c.send(q, groups)
	}
}

// take removes from q the batches of its next request: per partition, the pending batches in
// order merged into one record batch while it stays within MaxMessageBytes, the partitions
// within maxRequestBytes. A partition's batch that does not fit closes that partition for this
// request, so a partition's batches are always sent in submission order. Holding mu.
func (c *combiner) take(q *brokerQueue) [][]*batchReq {
	idem := c.seqs != nil
	spread := 0
	if idem {
		spread = c.spread(q)
	}
	at := make(map[topicPartition]int)
	closed := make(map[topicPartition]bool)
	var groups [][]*batchReq
	var sizes []int
	total := 0
	kept := q.pending[:0]
	now := c.now()
	for _, r := range q.pending {
		select {
		case <-r.gone:
			r.done <- batchResult{err: fmt.Errorf("not sent: %w", errNotSent)}
			continue
		default:
		}
		if !now.Before(r.deadline) {
			r.done <- batchResult{err: fmt.Errorf("not sent: waited %v for a request to the broker, its send's timeout: %w", now.Sub(r.deadline.Add(-c.s.cfg.Timeout)).Round(time.Millisecond), errNotSent)}
			continue
		}
		k := topicPartition{r.topic, r.partition}
		g, open := at[k]
		if idem && !open && !closed[k] && (len(groups) >= spread || !c.admits(k)) {
			closed[k] = true // its batch in flight is answered first, or another request takes it
		}
		switch {
		case closed[k]:
		case !open && (len(groups) == 0 || total+r.size <= maxRequestBytes):
			at[k] = len(groups)
			groups = append(groups, []*batchReq{r})
			sizes = append(sizes, r.size)
			total += r.size
			if r.alone {
				closed[k] = true
			}
			continue
		case open && !r.alone && total+r.size <= maxRequestBytes &&
			// Offsets in the merged batch are larger: up to 2 more varint bytes per record.
			sizes[g]+r.size-batchOverhead+2*len(r.idx) <= c.s.cfg.MaxMessageBytes:
			groups[g] = append(groups[g], r)
			add := r.size - batchOverhead + 2*len(r.idx)
			sizes[g] += add
			total += add
			continue
		}
		closed[k] = true
		kept = append(kept, r)
	}
	clear(q.pending[len(kept):])
	q.pending = kept
	return groups
}

// send produces groups (one record batch each) in one request, answers every batchReq, and
// frees q's slot (q is nil for a request outside the bound).
func (c *combiner) send(q *brokerQueue, groups [][]*batchReq) {
	// Bounded by Timeout and the Sends' deadlines, not by any one Send's ctx: the request
	// carries several Sends' records, and a Send that gives up stops waiting for it (sendRound)
	// without cancelling the others'.
	deadline := time.Now().Add(c.s.cfg.Timeout)
	for _, g := range groups {
		deadline = minTime(deadline, earliest(g))
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	res, err := c.s.produce(ctx, groups)
	cancel()
	for _, g := range groups {
		rp, perr := partitionAnswer(res, err, topicPartition{g[0].topic, g[0].partition})
		answerGroup(g, rp, perr)
	}
	if q != nil {
		c.mu.Lock()
		q.inflight--
		c.kick(q)
		c.mu.Unlock()
	}
}

// partitionAnswer is the broker's answer for partition k: its entry in res and its error, or
// err when the whole request failed.
func partitionAnswer(res map[topicPartition]*produceAPI.ResponsePartition, err error, k topicPartition) (*produceAPI.ResponsePartition, error) {
	if err != nil {
		return nil, err
	}
	rp := res[k]
	if rp == nil {
		return nil, fmt.Errorf("the broker's produce response has no answer for the partition: %w", protocol.ErrNoPartition)
	}
	if rp.ErrorCode == 0 {
		return rp, nil
	}
	perr := kafkago.Error(rp.ErrorCode)
	if rp.ErrorMessage != "" {
		return rp, fmt.Errorf("%w: %s", perr, rp.ErrorMessage)
	}
	return rp, perr
}

// answerGroup gives every batchReq of g, one record batch, the broker's answer rp and perr. With
// per-record errors each batchReq learns which of its own records (by index into its idx) were
// named.
func answerGroup(g []*batchReq, rp *produceAPI.ResponsePartition, perr error) {
	off := 0
	for _, r := range g {
		out := batchResult{err: perr, merged: len(g) > 1}
		if perr != nil && rp != nil && len(rp.RecordErrors) > 0 {
			out.recordErrors = true
			for _, re := range rp.RecordErrors {
				if k := int(re.BatchIndex) - off; k >= 0 && k < len(r.idx) {
					if out.badRecords == nil {
						out.badRecords = make(map[int]string)
					}
					out.badRecords[k] = re.BatchIndexErrorMessage
				}
			}
		}
		off += len(r.idx)
		r.done <- out
	}
}

type topicPartition struct {
	topic     string
	partition int
}

// produce sends groups, one record batch per partition holding the records of each group's
// batchReqs in order, in one produce request with acks=all, and blocks until the broker
// answered, Timeout passed or ctx ended. It returns each partition's answer, or the error that
// failed the whole request.
func (s *Sink) produce(ctx context.Context, groups [][]*batchReq) (map[topicPartition]*produceAPI.ResponsePartition, error) {
	attributes := protocol.Attributes(s.cfg.Compression) & 0x7
	req := &produceAPI.Request{
		Acks:    int16(kafkago.RequireAll),
		Timeout: brokerWaitMs(ctx, s.cfg.Timeout),
	}
	recs, hdrs, rds := recordSlabs(groups)
	for _, g := range groups {
		from := len(recs)
		recs, hdrs = appendRecords(recs, hdrs, &rds, g)
		topic := g[0].topic
		part := produceAPI.RequestPartition{
			Partition: int32(g[0].partition),
			RecordSet: protocol.RecordSet{Attributes: attributes, Records: kafkago.NewRecordReader(recs[from:]...)},
		}
		if n := len(req.Topics); n > 0 && req.Topics[n-1].Topic == topic {
			req.Topics[n-1].Partitions = append(req.Topics[n-1].Partitions, part)
		} else {
			req.Topics = append(req.Topics, produceAPI.RequestTopic{Topic: topic, Partitions: []produceAPI.RequestPartition{part}})
		}
	}
	return s.roundTripProduce(ctx, req, len(groups))
}

// recordSlabs returns empty slices with room for every record and header of groups, and for
// their keys' and values' readers (kafkago.NewBytes allocates one reader per key and per
// value): one slab each for the whole request.
func recordSlabs(groups [][]*batchReq) ([]kafkago.Record, []kafkago.Header, slabReaders) {
	nrec, nhdr := 0, 0
	for _, g := range groups {
		for _, r := range g {
			for _, i := range r.idx {
				nrec++
				nhdr += len(r.msgs[i].Headers)
			}
		}
	}
	return make([]kafkago.Record, 0, nrec), make([]kafkago.Header, 0, nhdr), make(slabReaders, 0, 2*nrec)
}

// appendRecords appends the records of g's batchReqs, in order, to recs (their headers to
// hdrs and their readers to rds, which must have room for them: the records point into both).
func appendRecords(recs []kafkago.Record, hdrs []kafkago.Header, rds *slabReaders, g []*batchReq) ([]kafkago.Record, []kafkago.Header) {
	for _, r := range g {
		for _, i := range r.idx {
			m := r.msgs[i]
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
				Key:     rds.bytes(m.Key),
				Value:   rds.bytes(m.Value),
				Headers: hs,
			})
		}
	}
	return recs, hdrs
}

// roundTripProduce sends a produce request of n partitions and returns each partition's
// answer, or the error that failed the whole request.
func (s *Sink) roundTripProduce(ctx context.Context, req protocol.Message, n int) (map[topicPartition]*produceAPI.ResponsePartition, error) {
	r, err := s.transport.RoundTrip(ctx, s.addr, req)
	if err != nil {
		return nil, fmt.Errorf("kafka produce: %w", err)
	}
	res, ok := r.(*produceAPI.Response)
	if !ok {
		return nil, fmt.Errorf("kafka produce: unexpected response %T", r)
	}
	out := make(map[topicPartition]*produceAPI.ResponsePartition, n)
	for ti := range res.Topics {
		t := &res.Topics[ti]
		for pi := range t.Partitions {
			out[topicPartition{t.Topic, int(t.Partitions[pi].Partition)}] = &t.Partitions[pi]
		}
	}
	return out, nil
}

// slabReader is kafkago.NewBytes's reader (a bytes.Reader that closes), kept in a slab.
type slabReader struct{ bytes.Reader }

func (*slabReader) Close() error { return nil }

// slabReaders hands out readers from one allocation; its capacity must cover every call.
type slabReaders []slabReader

// bytes is kafkago.NewBytes(b) from the slab: nil for a nil b (a null key or value).
func (s *slabReaders) bytes(b []byte) kafkago.Bytes {
	if b == nil {
		return nil
	}
	*s = append(*s, slabReader{})
	r := &(*s)[len(*s)-1]
	r.Reset(b)
	return r
}

// brokerWaitMs is the acks=all wait asked of the broker: half of what is left of timeout (or of
// ctx), leaving the rest for the network, as kafka-go's Client does.
func brokerWaitMs(ctx context.Context, timeout time.Duration) int32 {
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	return int32(max(timeout/2, time.Millisecond) / time.Millisecond)
}
