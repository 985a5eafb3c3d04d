package kafka

import (
	"context"
	"errors"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/sink"
)

// Errors the sink raises itself, before or instead of a broker answer. classify decides whether
// each is permanent.
var (
	// errTopicMissing: the topic is absent from freshly fetched metadata and the broker was not
	// asked (or refused) to create it. Retryable (sink.TopicMissing), not permanent.
	errTopicMissing = errors.New("topic does not exist")
	// errTooLarge: the encoded record batch of a single message exceeds MaxMessageBytes.
	errTooLarge = errors.New("message larger than max_message_bytes")
	// errInvalidMessage: a nil message or one without a topic.
	errInvalidMessage = errors.New("invalid message")
	// errNotSent marks a message that was held back (or rejected with its batch) because another
	// message failed; it is always retryable on its own.
	errNotSent = errors.New("not acknowledged because an earlier message failed")
	// errBadPartition: the message names a partition its topic does not have.
	errBadPartition = errors.New("no such partition")
	// errClosed: Send after Close.
	errClosed = errors.New("sink closed")
)

// ErrAuth marks a failed SASL authentication (wrong credentials or mechanism). It is transient
// for the pipeline on purpose: a credential problem is no fault of the message, so it must never
// make a row poison (dead-lettered or stopping as "undeliverable"); outboxd keeps retrying, the
// sink shows as down, and each retry logs the SASL error until the credentials are fixed.
var ErrAuth = errors.New("SASL authentication failed")

// classify is the one place that decides whether retrying err can succeed: it returns err
// wrapped with sink.Permanent when it cannot, wrapped with sink.TopicMissing when it waits for
// its topic to be created (retryable), and err unchanged otherwise. Everything not listed
// here (timeouts, network errors, leadership changes, NOT_ENOUGH_REPLICAS, a broker being down,
// a cancelled context) is transient, because the same bytes can succeed once the cluster heals.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotSent), errors.Is(err, errClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Checked first: these may carry a permanent cause in their text, but never in their
		// chain, and must stay retryable.
		return err
	case errors.Is(err, errTopicMissing):
		// Kafka itself retries UNKNOWN_TOPIC_OR_PARTITION: the topic may be created at any
		// moment. The pipeline bounds the wait (retry.missing_topic_timeout).
		return sink.TopicMissing(err)
	case errors.Is(err, errTooLarge), errors.Is(err, errInvalidMessage), errors.Is(err, errBadPartition):
		return sink.Permanent(err)
	}
	var code kafkago.Error
	if errors.As(err, &code) {
		switch code {
		case kafkago.UnknownTopicOrPartition: // 3: from a produce answer; metadata is refreshed too
			return sink.TopicMissing(err)
		case kafkago.InvalidTimestamp: // 32: the same record is refused again
			// A record's time is its row's commit time (or its columns.timestamp), on the
			// database's clock: a clock far off the brokers' is the likelier cause, and the
			// message says so (Kafka 4 refuses more than an hour ahead by default).
			return sink.Permanent(fmt.Errorf("%w: %s", err, sink.TimestampHint))
		case kafkago.MessageSizeTooLarge, // 10: the batch is over message.max.bytes
			kafkago.InvalidTopic,                // 17
			kafkago.RecordListTooLarge,          // 18
			kafkago.TopicAuthorizationFailed,    // 29: needs an ACL change, not a retry
			kafkago.ClusterAuthorizationFailed,  // 31
			kafkago.InvalidRequest,              // 42: the same bytes are rejected again
			kafkago.UnsupportedForMessageFormat, // 43
			kafkago.PolicyViolation,             // 44
			kafkago.UnsupportedCompressionType,  // 76
			kafkago.InvalidRecord,               // 87: e.g. a compacted topic and a nil key
			kafkago.InvalidRequiredAcks:         // 21
			return sink.Permanent(err)
		}
	}
	return err
}

// staleMetadata reports whether err suggests that the cached cluster layout (leaders, brokers,
// topics, partition counts) is out of date, so the next request should use fresh metadata.
func staleMetadata(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var code kafkago.Error
	if errors.As(err, &code) {
		switch code {
		case kafkago.UnknownTopicOrPartition, kafkago.LeaderNotAvailable, kafkago.NotLeaderForPartition,
			kafkago.BrokerNotAvailable, kafkago.ReplicaNotAvailable, kafkago.NetworkException,
			kafkago.KafkaStorageError, kafkago.FencedLeaderEpoch, kafkago.UnknownLeaderEpoch:
			return true
		}
		return false
	}
	// Network errors, timeouts and kafka-go's own routing errors (no topic, no partition, no
	// leader in the cached layout): the broker we talk to may be gone or the layout changed.
	return true
}
