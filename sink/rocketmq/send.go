package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/internal/rmqprops"
	"github.com/outboxd/outboxd/sink"
)

// storedOverhead is what a broker's commit log adds to each message of a batch beyond its
// body, properties and topic name (MessageExtEncoder's fixed fields, IPv6 hosts and the 5.x
// CRC room included), rounded up: a 4.x broker counts it against maxMessageSize.
const storedOverhead = 160

// routeRaceWait is how long a request that lost the client's route race (see sendBatch)
// waits before it is sent again.
const routeRaceWait = 10 * time.Millisecond

// relookupAfter is how long learnQueues leaves a topic whose queue count lookup failed.
const relookupAfter = 10 * time.Second

// outMsg is one message of a Send, encoded before any I/O.
type outMsg struct {
	m    *sink.Message
	pm   *primitive.Message
	hash uint32
	// size is what the message adds to a batch, as the broker stores it.
	size int
}

// build encodes m, or says why it can never be sent. It returns the message and the bytes
// it takes in a batch.
func (s *Sink) build(i int, m *sink.Message) (*primitive.Message, int, error) {
	if m == nil {
		return nil, 0, fmt.Errorf("message %d is nil: %w", i, errInvalidMessage)
	}
	if err := checkTopic(m.Topic); err != nil {
		return nil, 0, err
	}
	if err := checkTopic(s.namespaced(m.Topic)); err != nil {
		return nil, 0, fmt.Errorf("with namespace %q: %w", s.cfg.Namespace, err)
	}
	if len(m.Value) == 0 {
		return nil, 0, fmt.Errorf("topic %s: message %d (event %s) has an empty body, which RocketMQ rejects: %w", m.Topic, i, m.EventID, errInvalidMessage)
	}
	if len(m.Value) > s.cfg.MaxMessageBytes {
		return nil, 0, fmt.Errorf("topic %s: message %d (event %s) body is %d bytes, over max_message_bytes %d; raise it (and the broker's maxMessageSize) or shrink the event: %w",
			m.Topic, i, m.EventID, len(m.Value), s.cfg.MaxMessageBytes, errTooLarge)
	}
	props := make(map[string]string, len(m.Headers)+4)
	for _, h := range m.Headers {
		why := rmqprops.NameProblem(h.Key)
		if _, dup := props[h.Key]; dup && why == "" {
			why = "repeats an earlier header (RocketMQ properties are a map)"
		}
		if why != "" {
			s.dropHeader(h.Key, why)
			continue
		}
		props[h.Key] = rmqprops.EncodeValue(h.Value)
	}
	// Set after the headers, which can therefore never replace them.
	if m.Key != nil {
		props[primitive.PropertyShardingKey] = rmqprops.EncodeValue(m.Key)
	}
	if m.EventID != "" {
		props[primitive.PropertyKeys] = rmqprops.EncodeValue([]byte(m.EventID))
	}
	if m.Tag != "" {
		props[primitive.PropertyTags] = rmqprops.EncodeValue([]byte(m.Tag))
	}
	// The client gives a message sent alone a UNIQ_KEY (its msg_id) in the same format, but
	// none to the messages of a batch: set here, every message has one however it is sent.
	props[primitive.PropertyUniqueClientMessageIdKeyIndex] = primitive.CreateUniqID()
	n := propertiesSize(props)
	if n > maxPropertiesBytes {
		return nil, 0, fmt.Errorf("topic %s: message %d (event %s) headers, key and tag encode to %d bytes of properties, over RocketMQ's limit of %d; shrink the headers: %w",
			m.Topic, i, m.EventID, n, maxPropertiesBytes, errTooLarge)
	}
	pm := primitive.NewMessage(m.Topic, m.Value)
	pm.WithProperties(props)
	return pm, len(m.Value) + n + len(s.namespaced(m.Topic)) + storedOverhead, nil
}

func (s *Sink) dropHeader(name, why string) {
	s.droppedHeaders.Add(1)
	if _, seen := s.warned.LoadOrStore(name, struct{}{}); !seen {
		s.log.Warn().Str("header", name).Msgf("header not sent: its name %s (logged once per name)", why)
	}
}

// hint is what the selector needs to place one request.
type hint struct {
	hash uint32
	// n is the queue count a batch of several messages was grouped for (its keys share a
	// queue only under that count); 0 for a message sent alone, which any count places right.
	n int
	// refused is the queue count the selector saw when it refused the batch (n differed).
	refused atomic.Int32
}

// lane is the messages of one Send bound for one queue of one topic, in slice order.
type lane struct {
	topic string
	// n is the topic's queue count the lane was grouped by; 0 when the sink had not learned it,
	// in which case the lane is hash modulo maxLanes, may span queues, and sends one message
	// at a time.
	n   int
	idx []int
}

// Send sends the messages bound for each queue as batches (SendSync with several messages),
// and blocks until every one was answered, failed, or ctx ended. It returns nil only when
// the broker answered SEND_OK for every message; otherwise a *sink.SendError whose failures
// carry classify's verdict. Messages with the same key go to the same queue in slice order,
// one batch in flight per queue. A batch succeeds or fails as a whole, and a transient
// failure fails every later message of its queue unsent, so nothing behind it is
// acknowledged before it; a batch rejected for good is resent one message at a time, so that
// only the culprit is permanent and the queue's other keys go on past it. A failed message
// fails every later one with the same key (across topics too). A cancelled ctx returns at
// once, every unanswered message failed (a request already on the wire may still be stored:
// a resend can duplicate it). Safe for concurrent use; callers keep one key in at most one
// Send at a time.
func (s *Sink) Send(ctx context.Context, msgs []*sink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return sink.AllFailed(len(msgs), fmt.Errorf("rocketmq sink %q: %w", s.name, errClosed))
	}
	if err := ctx.Err(); err != nil {
		return sink.AllFailed(len(msgs), fmt.Errorf("rocketmq sink %q: %w", s.name, err))
	}
	// Nothing of the Send is written after its start plus SendTimeout (the client carries the
	// deadline to the socket): the HA lock's timing counts on a leader's sends ending within
	// LongestSend of the Send its guard let start. Each request was bounded alone before, so a
	// Send of several batches on one queue, or one that waited for a lane (FanOut) while the
	// process was frozen, could write later. A batch cut off is failed and resent.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	errs := make([]error, len(msgs))
	out := make([]outMsg, len(msgs))
	for i, m := range msgs {
		pm, size, err := s.build(i, m)
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		h := s.rr.Add(1)
		if m.Key != nil {
			h = keyHash(m.Key)
		}
		out[i] = outMsg{m: m, pm: pm, hash: h, size: size}
	}
	sink.CascadeByKey(msgs, errs, errNotSent)

	s.learnQueues(ctx, out, errs)
	lanes := s.assign(out, errs)
	run := &sendRun{s: s, out: out, errs: errs, topicErr: map[string]error{}}
	sink.FanOut(ctx, len(lanes), maxLanes,
		func(k int) { run.lane(ctx, lanes[k]) },
		func(k int) {
			l := lanes[k]
			for _, i := range l.idx {
				errs[i] = fmt.Errorf("rocketmq sink %q: topic %s: %w", s.name, l.topic, ctx.Err())
			}
		})
	sink.CascadeByKey(msgs, errs, errNotSent)

	return sink.Collect(errs, nil)
}

// learnQueues asks the NameServers for the queue count of each topic in out the sink has not
// sent to yet, so that the first Send to a topic can batch too. A lookup that fails or ends
// with ctx (or after SendTimeout) leaves the count unknown: the sends then go one at a time
// and find out, and report, what is wrong. A topic whose lookup failed is not looked up again
// for relookupAfter (the client logs each failed lookup as an error, and a missing topic is
// retried often). It blocks for the lookups.
func (s *Sink) learnQueues(ctx context.Context, out []outMsg, errs []error) {
	var unknown []string
	s.mu.Lock()
	now := time.Now()
	for i, o := range out {
		if errs[i] != nil || slices.Contains(unknown, o.m.Topic) {
			continue
		}
		ns := s.namespaced(o.m.Topic)
		if _, ok := s.queues[ns]; !ok && now.Sub(s.lookupFailed[ns]) >= relookupAfter {
			unknown = append(unknown, o.m.Topic)
		}
	}
	s.mu.Unlock()
	for _, topic := range unknown {
		n, err := s.queueCount(ctx, topic)
		ns := s.namespaced(topic)
		s.mu.Lock()
		switch {
		case err == nil && n > 0:
			if _, ok := s.queues[ns]; !ok {
				s.queues[ns] = n
			}
			delete(s.lookupFailed, ns)
		case ctx.Err() == nil:
			s.lookupFailed[ns] = time.Now()
		}
		s.mu.Unlock()
	}
}

// queueCount is topic's writable queue count as the NameServers route it. The client's
// lookup ignores ctx; ctx and SendTimeout only end the wait.
func (s *Sink) queueCount(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		conn, err := s.connect(ctx)
		if err != nil {
			ch <- result{0, err}
			return
		}
		// FetchPublishMessageQueues applies the namespace itself.
		mqs, err := conn.admin.FetchPublishMessageQueues(ctx, topic)
		ch <- result{len(mqs), err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// assign groups the sendable messages into lanes: per topic, hash modulo the topic's queue
// count as last seen by the selector (so a lane is a queue), or modulo maxLanes before the
// sink has learned the topic's route. Either way one key is in one lane, which is what keeps
// its order; the queue itself is chosen by the selector from the same hash.
func (s *Sink) assign(out []outMsg, errs []error) []*lane {
	type laneKey struct {
		topic string
		n     uint32
	}
	s.mu.Lock()
	counts := make(map[string]int)
	for i, o := range out {
		if errs[i] == nil {
			if _, ok := counts[o.m.Topic]; !ok {
				counts[o.m.Topic] = s.queues[s.namespaced(o.m.Topic)]
			}
		}
	}
	s.mu.Unlock()
	byKey := make(map[laneKey]*lane)
	var order []*lane
	for i, o := range out {
		if errs[i] != nil {
			continue
		}
		n := counts[o.m.Topic]
		mod := uint32(n)
		if mod == 0 {
			mod = maxLanes
		}
		k := laneKey{o.m.Topic, o.hash % mod}
		l := byKey[k]
		if l == nil {
			l = &lane{topic: o.m.Topic, n: n}
			byKey[k] = l
			order = append(order, l)
		}
		l.idx = append(l.idx, i)
	}
	return order
}

// sendRun is the state of one Send shared by its lanes. Each errs index is written by one
// lane only.
type sendRun struct {
	s    *Sink
	out  []outMsg
	errs []error

	mu sync.Mutex
	// topicErr is a route-level failure for a topic (no route, confirmed missing or not):
	// the topic's remaining messages fail with it instead of each asking the NameServer.
	topicErr map[string]error
}

// lane sends l's messages in batches, each after the previous one was answered SEND_OK.
func (r *sendRun) lane(ctx context.Context, l *lane) {
	s := r.s
	failedKey := make(map[string]int) // key → index of its first (permanent) failure in this lane
	pending := l.idx
	alone := 0 // how many of pending go one at a time: a batch the broker rejected for good
	for len(pending) > 0 {
		// A topic-wide verdict comes first: for a missing topic every message is
		// topic-missing, including the ones that follow a failed key.
		if terr := r.topicFailure(l.topic); terr != nil {
			for _, i := range pending {
				r.errs[i] = fmt.Errorf("message %d not sent: %w", i, terr)
			}
			return
		}
		if err := ctx.Err(); err != nil {
			for _, i := range pending {
				r.errs[i] = fmt.Errorf("rocketmq sink %q: topic %s: %w", s.name, l.topic, err)
			}
			return
		}
		batch, used := r.next(l, pending, alone > 0, failedKey)
		if len(batch) == 0 { // everything left follows a failed key
			return
		}
		err := r.sendBatch(ctx, l, batch)
		switch {
		case err == nil:
		case len(batch) > 1 && sink.IsPermanent(err):
			// Nothing of it was stored; which message the broker refused is unknown, and
			// failing all of them for good would dead-letter good rows: resend them alone.
			alone = used
			continue
		case sink.IsPermanent(err):
			// One message refused for good: its key's followers are held back, the
			// queue's other keys go on (a resend of this message cannot succeed anyway).
			r.errs[batch[0]] = err
			if k := r.out[batch[0]].m.Key; k != nil {
				failedKey[string(k)] = batch[0]
			}
		default:
			// Transient: the batch may succeed on a resend, so nothing behind it in this
			// queue may be acknowledged before it.
			for _, i := range batch {
				r.errs[i] = err
			}
			r.failRest(l, pending[used:], batch[0])
			return
		}
		pending = pending[used:]
		alone = max(0, alone-used)
	}
}

// next picks the next batch from pending: up to maxBatchMessages messages and maxBatchBytes
// (always at least one message), one alone when the lane spans queues or alone is set.
// Messages that follow a failed key are failed unsent on the way. used is how many of
// pending it consumed.
func (r *sendRun) next(l *lane, pending []int, alone bool, failedKey map[string]int) (batch []int, used int) {
	cfg := r.s.cfg
	bytes := 0
	for _, i := range pending {
		o := r.out[i]
		if o.m.Key != nil {
			if j, failed := failedKey[string(o.m.Key)]; failed {
				r.errs[i] = fmt.Errorf("topic %s: message %d follows failed message %d with the same key: %w", l.topic, i, j, errNotSent)
				used++
				continue
			}
		}
		if len(batch) > 0 && (alone || l.n == 0 || len(batch) == cfg.maxBatchMessages || bytes+o.size > cfg.maxBatchBytes) {
			break
		}
		batch = append(batch, i)
		bytes += o.size
		used++
	}
	return batch, used
}

// failRest fails the lane's messages behind a failed batch unsent, with the topic's verdict
// when there is one (a missing topic is missing for all of them).
func (r *sendRun) failRest(l *lane, rest []int, failed int) {
	terr := r.topicFailure(l.topic)
	for _, i := range rest {
		if terr != nil {
			r.errs[i] = fmt.Errorf("message %d not sent: %w", i, terr)
			continue
		}
		r.errs[i] = fmt.Errorf("topic %s: message %d follows failed message %d in its queue: %w", l.topic, i, failed, errNotSent)
	}
}

func (r *sendRun) topicFailure(topic string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topicErr[topic]
}

// sendBatch sends the messages batch (indexes into out, all bound for one queue) as one
// request and returns nil only on SEND_OK; otherwise the classified error, which is the
// verdict for each of them.
func (r *sendRun) sendBatch(ctx context.Context, l *lane, batch []int) error {
	s := r.s
	first := r.out[batch[0]]
	pms := make([]*primitive.Message, len(batch))
	h := &hint{hash: first.hash}
	// The queue the keys hash to (its index in the topic's route, which is the queue id with
	// one broker), on the first message: the client copies it onto the batch message it
	// hands the selector, which finds the hint by it.
	q := &primitive.MessageQueue{Topic: s.namespaced(l.topic), QueueId: -1}
	if l.n > 0 {
		q.QueueId = int(first.hash % uint32(l.n))
		if len(batch) > 1 {
			h.n = l.n
		}
	}
	// what names the request in error messages (built only when one is).
	what := func() string {
		if len(batch) > 1 {
			return fmt.Sprintf("batch of %d messages from message %d, event %s", len(batch), batch[0], first.m.EventID)
		}
		return fmt.Sprintf("message %d, event %s", batch[0], first.m.EventID)
	}
	var res *primitive.SendResult
	var err error
	for attempt := 0; ; attempt++ {
		for k, i := range batch {
			pms[k] = r.out[i].pm
			// The client prefixes the namespace in place: undo it for a resend.
			pms[k].Topic = r.out[i].m.Topic
			pms[k].Queue = nil
		}
		pms[0].Queue = q
		res, err = s.sendSync(ctx, pms, h)
		// The client publishes a route it has just looked up before it records the
		// broker's address: a concurrent first request to that broker can find the queues
		// but no address, and fails before any I/O. Sending it again cannot duplicate.
		if attempt == 0 && ctx.Err() == nil && routeRace(err) {
			time.Sleep(routeRaceWait)
			continue
		}
		break
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// The client reports a cancelled request as its own "request timeout".
			return fmt.Errorf("rocketmq sink %q: topic %s: %s: %w (client: %v)", s.name, l.topic, what(), cerr, err)
		}
		if errors.Is(err, errClosed) || errors.Is(err, rmqerrors.ErrNotRunning) {
			return fmt.Errorf("rocketmq sink %q: %w", s.name, errClosed)
		}
		if n := h.refused.Load(); n != 0 {
			return fmt.Errorf("rocketmq sink %q: topic %s (%s): not sent, the topic has %d writable queues now, not the %d it was grouped for: %w",
				s.name, l.topic, what(), n, h.n, errQueuesChanged)
		}
		err = fmt.Errorf("rocketmq sink %q: send to topic %s (%s): %w", s.name, l.topic, what(), err)
		if needsRouteCheck(err) {
			// Held across the lookup so that the topic's other lanes wait for one verdict
			// instead of each asking the NameServer.
			r.mu.Lock()
			defer r.mu.Unlock()
			if prev := r.topicErr[l.topic]; prev != nil {
				return fmt.Errorf("message %d: %w", batch[0], prev)
			}
			err = classify(s.checkMissing(ctx, l.topic, err))
			r.topicErr[l.topic] = err
			return err
		}
		return classify(err)
	}
	queue := -1
	if res.MessageQueue != nil {
		queue = res.MessageQueue.QueueId
	}
	if e := s.log.Debug(); e.Enabled() {
		e.Discard()
		// A batch's answer carries the broker's ids comma-joined and its first offset.
		offIDs := strings.Split(res.OffsetMsgID, ",")
		for k, i := range batch {
			offID := ""
			if k < len(offIDs) {
				offID = offIDs[k]
			}
			o := r.out[i]
			s.log.Debug().Str("topic", l.topic).Str("event_id", o.m.EventID).
				Str("msg_id", o.pm.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)).
				Str("offset_msg_id", offID).Int("queue", queue).Int64("offset", res.QueueOffset+int64(k)).
				Int("batch", len(batch)).Str("status", statusName(res.Status)).Msg("send answered")
		}
	}
	if res.Status != primitive.SendOK {
		return classify(fmt.Errorf("rocketmq sink %q: topic %s queue %d (%s) answered %s: %w",
			s.name, l.topic, queue, what(), statusName(res.Status), errNotOK))
	}
	return nil
}

func statusName(st primitive.SendStatus) string {
	switch st {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	default:
		return fmt.Sprintf("status %d", st)
	}
}

// sendSync runs the client's SendSync of pms (one request: a batch when several) in a
// goroutine so that ctx ends the wait at once: the client's route lookup ignores ctx (up to
// 6 s per NameServer). The goroutine, if abandoned, ends at the latest when its own cancelled
// request or the route lookup returns; Close cancels and waits for it. pms[0].Queue carries
// h to the selector.
func (s *Sink) sendSync(ctx context.Context, pms []*primitive.Message, h *hint) (*primitive.SendResult, error) {
	sendCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	id := s.nextID
	s.nextID++
	s.cancels[id] = cancel
	s.wg.Add(1)
	s.mu.Unlock()

	type result struct {
		res *primitive.SendResult
		err error
	}
	ch := make(chan result, 1)
	key := pms[0].Queue
	s.hints.Store(key, h)
	go func() {
		defer s.wg.Done()
		var res *primitive.SendResult
		c, err := s.connect(sendCtx)
		if err == nil {
			res, err = c.producer.SendSync(sendCtx, pms...)
		}
		s.hints.Delete(key)
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		ch <- result{res, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-sendCtx.Done():
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, errClosed
	}
}
