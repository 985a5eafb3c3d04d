package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
)

var _ sink.Sink = (*Session)(nil)

// Send produces msgs into the open transaction (begun if none) and blocks until the broker
// acknowledged each (acks=all), ctx ends, or a record failed for good. Records go out in slice
// order, so per-key order holds within and across calls (kgo keeps one partition's records in
// produce order, with sequence numbers). Transient broker errors are retried inside by kgo.
//
// It returns nil only when every message is acknowledged; a *sink.SendError lists the others
// (a message above MaxMessageBytes fails permanently before being produced and does not doom
// the transaction; any other failure does: Save then aborts). A refusal for fencing returns an
// error wrapping sink.ErrFenced instead. Safe for concurrent use.
func (s *Session) Send(ctx context.Context, msgs []*sink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s.txnMu.RLock()
	defer s.txnMu.RUnlock()
	if err := s.begin(); err != nil {
		if errors.Is(err, sink.ErrFenced) {
			return err
		}
		return sink.AllFailed(len(msgs), err)
	}

	errs := make([]error, len(msgs))
	oversized := make([]bool, len(msgs))
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(msgs))
	pending := 0
	// A refusal for fencing is recorded (and counted, once per Send) when kgo reports it, not
	// when this Send reads it: a Send that returned already (its ctx ended: a halt, a
	// shutdown) still leaves the broker's refusal of its records on record.
	var refusal sync.Once
	for i, m := range msgs {
		if n := kafka.SingleBatchSize(m); n > s.o.MaxMessageBytes {
			errs[i] = sink.Permanent(fmt.Errorf("topic %s: message of %d bytes (as a record batch) is larger than the limit of %d bytes (broker message.max.bytes)", m.Topic, n, s.o.MaxMessageBytes))
			oversized[i] = true
			continue
		}
		pending++
		s.cl.Produce(ctx, record(m), func(_ *kgo.Record, err error) {
			if err != nil && isFenced(err) {
				refusal.Do(func() { s.fencedError(err) })
			}
			done <- result{i, err}
		})
	}
	for ; pending > 0; pending-- {
		select {
		case r := <-done:
			errs[r.i] = r.err
		case <-ctx.Done():
			// The records still buffered or in flight may yet join the transaction: it is
			// doomed, Save aborts it.
			for i := range errs {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("topic %s: not acknowledged: %w", msgs[i].Topic, ctx.Err())
				}
			}
			s.doom(ctx.Err())
			return failures(msgs, errs)
		}
	}
	var fenced error
	for i, err := range errs {
		if err == nil || oversized[i] {
			continue
		}
		if isFenced(err) {
			if fenced == nil { // recorded and counted by the promise above
				s.mu.Lock()
				fenced = s.fenced
				s.mu.Unlock()
			}
			continue
		}
		s.doom(err)
		errs[i] = classify(msgs[i].Topic, err)
	}
	if fenced != nil {
		return fenced
	}
	return failures(msgs, errs)
}

// begin begins a transaction unless one is open. The caller holds txnMu (shared or not).
func (s *Session) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readyLocked(); err != nil {
		return err
	}
	if s.unknown != nil {
		return fmt.Errorf("kafka sink %q: the last commit's outcome is unknown; Save resolves it first", s.o.Name)
	}
	if s.doomed != nil {
		return fmt.Errorf("kafka sink %q: %w: a record of the open transaction failed: %w", s.o.Name, sink.ErrTxnAborted, s.doomed)
	}
	if s.inTxn {
		return nil
	}
	if err := s.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("kafka sink %q: begin transaction: %w", s.o.Name, err)
	}
	s.inTxn = true
	return nil
}

// doom records the first failure of a record of the open transaction.
func (s *Session) doom(err error) {
	s.mu.Lock()
	if s.doomed == nil {
		s.doomed = err
	}
	s.mu.Unlock()
}

// record builds the kgo record; Timestamp zero is stamped by kgo at produce time.
func record(m *sink.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Timestamp: m.Time, Partition: autoPartition}
	if m.HasPartition {
		r.Partition = m.Partition
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return r
}

// failures builds the SendError for errs (nil when none), failing each message whose key had an
// earlier failure in the same topic too, as sink.Sink requires for ordered resends.
func failures(msgs []*sink.Message, errs []error) error {
	type topicKey struct{ topic, key string }
	var failed map[topicKey]error
	var fs []sink.Failure
	for i, m := range msgs {
		k := topicKey{m.Topic, string(m.Key)}
		if errs[i] == nil && m.Key != nil && failed[k] != nil {
			// %v: the earlier failure's marks (permanent) are its own; this message may well be
			// fine, and must not be taken for one the broker refused for good.
			errs[i] = fmt.Errorf("topic %s: not acknowledged: an earlier message with the same key failed: %v", m.Topic, failed[k])
		}
		if errs[i] == nil {
			continue
		}
		if m.Key != nil {
			if failed == nil {
				failed = make(map[topicKey]error)
			}
			if failed[k] == nil {
				failed[k] = errs[i]
			}
		}
		fs = append(fs, sink.Failure{Index: i, Err: errs[i]})
	}
	if len(fs) == 0 {
		return nil
	}
	return &sink.SendError{Failures: fs}
}

// classify is the one place that decides whether a record's failure can succeed on a retry.
// kgo retries transient errors itself (without a deadline), so what reaches here is mostly
// final: the broker's permanent refusals are marked sink.Permanent, a topic the brokers do not
// know sink.TopicMissing, and the rest (a cancelled context, an aborting client) stays
// retryable.
func classify(topic string, err error) error {
	err = fmt.Errorf("topic %s: %w", topic, err)
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.CorruptMessage),
		errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.InvalidRequiredAcks),
		errors.Is(err, kerr.UnsupportedCompressionType):
		return sink.Permanent(err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return sink.Permanent(&sink.FixError{Err: err, Fix: "grant this principal WRITE on the topic"})
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return sink.TopicMissing(err)
	case errors.Is(err, kerr.InvalidTimestamp):
		// Retryable, as kgo leaves it: the transaction aborts and the relay streams again
		// with its backoff until the clocks or the topic settings change.
		return fmt.Errorf("%w: %s", err, sink.TimestampHint)
	case strings.Contains(err.Error(), "invalid record partitioning choice"):
		return sink.Permanent(fmt.Errorf("%w (the message names a partition the topic does not have)", err))
	}
	return err
}
