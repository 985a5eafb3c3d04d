// Package sink defines the contract every broker sink implements: Send returns only after the
// broker acknowledged every message, or with an error that says which messages failed.
//
// "No error returned" from a client library is never proof of delivery; a sink turns the broker's
// own acknowledgement (Kafka acks=all, RocketMQ SEND_OK) into a nil error and everything else into
// a Failure.
package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Header is one message header (Kafka record header, RocketMQ user property).
type Header struct {
	Key   string
	Value []byte
}

// Message is a fully encoded message: the router produced its final topic, key, headers and
// bytes, so a retry resends exactly these bytes and does no encoding work again.
type Message struct {
	// Topic is the destination topic on the sink.
	Topic string
	// Key orders and partitions the message (Kafka key, RocketMQ sharding key). Nil means no key.
	Key []byte
	// Value is the payload. Nil is a null value on Kafka (a tombstone for compacted topics);
	// RocketMQ refuses an empty body either way.
	Value []byte
	// Headers carry event_id, event_type, outbox_table, outbox_gtid and the row's own headers.
	Headers []Header
	// Time is the source transaction's commit time.
	Time time.Time
	// EventID is the row's event id (also among Headers); RocketMQ sets it as the message Keys.
	EventID string
	// Tag is the RocketMQ tag; other sinks ignore it.
	Tag string
	// Partition is the Kafka partition when HasPartition is set (tables[].columns.partition);
	// otherwise the sink picks it by Key. A partition the topic does not have (in metadata
	// fetched after the Send started) fails the message permanently. Other sinks ignore it (config refuses it for them).
	Partition    int32
	HasPartition bool

	// keyHash caches KeyHash.
	keyHash   uint32
	keyHashed bool
}

// Size approximates the message's memory and wire size in bytes.
func (m *Message) Size() int {
	n := len(m.Topic) + len(m.Key) + len(m.Value) + len(m.EventID) + len(m.Tag)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Sink delivers messages to one broker cluster.
type Sink interface {
	// Send blocks until the broker acknowledged every message in msgs, or until it knows which
	// ones it did not. It returns nil only when every message is acknowledged (stored per the
	// sink's durability setting). Otherwise it returns a *SendError listing the failed messages;
	// any message not listed there was acknowledged. Within one call, messages with the same Key
	// are sent in slice order, and when one of them fails every later one with the same Key is
	// reported failed too (not sent, or sent but not acknowledged), so the caller can resend the
	// failed ones in order without a later message overtaking an earlier one.
	// A message whose topic does not exist fails with an error for which IsTopicMissing is
	// true and IsPermanent false: retrying can succeed once the topic is created.
	// A cancelled ctx makes Send return promptly with every unacknowledged message failed.
	// Safe for concurrent use, but callers that need per-key order must not have two Sends with
	// the same key in flight at once.
	Send(ctx context.Context, msgs []*Message) error
	// Close releases connections. It does not wait for anything but its own cleanup.
	Close() error
}

// Checker is implemented by sinks that can verify connectivity and configuration, for
// `outboxd check`. It blocks until the broker answered or ctx ends.
type Checker interface {
	Check(ctx context.Context, topics []string) error
}

// ErrPermanent marks an error that retrying cannot fix (message too large, an invalid or
// forbidden topic). Test with IsPermanent.
var ErrPermanent = errors.New("permanent")

// Permanent wraps err so that IsPermanent reports true for it.
func Permanent(err error) error { return withMark(err, ErrPermanent) }

// withMark wraps err so that errors.Is(result, mark) holds, keeping err's text; err already
// marked, or nil, is returned unchanged.
func withMark(err, mark error) error {
	if err == nil || errors.Is(err, mark) {
		return err
	}
	return &markedError{err: err, mark: mark}
}

type markedError struct{ err, mark error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.err, e.mark} }

// IsPermanent reports whether err can never succeed on retry.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// ErrTopicMissing marks a failure because the message's topic does not exist on the broker
// (Kafka UNKNOWN_TOPIC_OR_PARTITION confirmed by fresh metadata, a RocketMQ topic the
// NameServers have no route for). It is retryable, never permanent: the topic may be created
// any moment (by an operator, a deployment, auto-creation), and the same bytes then succeed.
// The caller decides how long to wait for it (outboxd: retry.missing_topic_timeout). A sink
// reports it only for a broker that answered; an unreachable one gives an ordinary transient
// error. Test with IsTopicMissing.
var ErrTopicMissing = errors.New("topic does not exist")

// TopicMissing marks err as a missing topic: IsTopicMissing reports true for the result, and
// IsPermanent stays false (unless err already was permanent, which then wins).
func TopicMissing(err error) error { return withMark(err, ErrTopicMissing) }

// IsTopicMissing reports whether err failed only because its topic does not exist (yet): a
// retryable error the caller may bound in time. A permanent error is never topic-missing.
func IsTopicMissing(err error) bool { return errors.Is(err, ErrTopicMissing) && !IsPermanent(err) }

// FixError is an error that a setting or a permission on the broker causes, with what to change
// (for check's fix). Its text includes the fix, for run's logs. Test with errors.As.
type FixError struct {
	Err error
	Fix string
}

func (e *FixError) Error() string { return e.Err.Error() + "; " + e.Fix }
func (e *FixError) Unwrap() error { return e.Err }

// Failure is one message that was not acknowledged.
type Failure struct {
	// Index is the message's position in the slice passed to Send.
	Index int
	// Err says why; IsPermanent(Err) tells whether a retry can succeed, IsTopicMissing(Err)
	// whether it waits for its topic to be created.
	Err error
}

// SendError is returned by Send when some messages were not acknowledged.
type SendError struct {
	// Failures are sorted by Index.
	Failures []Failure
}

func (e *SendError) Error() string {
	if len(e.Failures) == 0 {
		return "send failed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s) not acknowledged: %v", len(e.Failures), e.Failures[0].Err)
	if len(e.Failures) > 1 {
		fmt.Fprintf(&b, " (and %d more)", len(e.Failures)-1)
	}
	return b.String()
}

// Unwrap exposes the first failure's cause to errors.Is and errors.As.
func (e *SendError) Unwrap() error {
	if len(e.Failures) == 0 {
		return nil
	}
	return e.Failures[0].Err
}

// AllFailed builds a SendError that fails every message of a batch of n with err.
func AllFailed(n int, err error) *SendError {
	fs := make([]Failure, n)
	for i := range fs {
		fs[i] = Failure{Index: i, Err: err}
	}
	return &SendError{Failures: fs}
}

// ErrFenced marks a refusal by the broker because a newer producer took this one's
// transactional id (Kafka PRODUCER_FENCED, INVALID_PRODUCER_EPOCH on a transactional producer):
// another outboxd leads now. Nothing more may be sent or saved; the caller halts at once.
// Never retried.
var ErrFenced = errors.New("fenced by a newer producer with the same transactional id")

// ErrTxnAborted marks a broker transaction that was aborted instead of committed (a record of
// it failed, or the broker aborted it): nothing sent in it is visible to read_committed
// consumers, and the checkpoint it was to carry was not saved. The caller starts again from the
// last committed checkpoint.
var ErrTxnAborted = errors.New("transaction aborted")
