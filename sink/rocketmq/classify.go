package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/sink"
)

// ErrAuth marks a send the broker's ACL rejected: the AccessKey is unknown, the signature does
// not match (wrong SecretKey), or the request carried no credentials. It is transient on
// purpose: the rows are fine and the operator must fix the config, so the pipeline retries with
// backoff and reports the sink as down instead of dead-lettering every row. Test with
// errors.Is.
var ErrAuth = errors.New("rocketmq ACL authentication failed")

// Errors the sink raises itself. classify decides whether each is permanent.
var (
	// errTopicMissing: the NameServer answered TOPIC_NOT_EXIST for a topic this sink never saw
	// a route for. Retryable (sink.TopicMissing), not permanent.
	errTopicMissing = errors.New("topic does not exist")
	// errTooLarge: the body is over MaxMessageBytes, or the properties over RocketMQ's limit.
	errTooLarge = errors.New("message too large")
	// errInvalidMessage: a nil message, a bad topic name or an empty body.
	errInvalidMessage = errors.New("invalid message")
	// errNotSent marks a message held back because an earlier one failed; it is always
	// retryable on its own.
	errNotSent = errors.New("not sent because an earlier message failed")
	// errNotOK: the broker answered with a status other than SEND_OK. The message may be stored
	// (not flushed or not replicated as configured): a resend can duplicate it, which
	// at-least-once allows, while losing it would not be.
	errNotOK = errors.New("broker did not answer SEND_OK")
	// errQueuesChanged: a batch was grouped for a queue count the topic no longer has, so its
	// keys no longer share a queue; it was not sent and is retryable (the resend regroups).
	errQueuesChanged = errors.New("topic's queue count changed")
	// errClosed: Send after (or during) Close.
	errClosed = errors.New("sink closed")
)

// RocketMQ response codes (ResponseCode in the Java broker) that classify looks at.
const (
	codeSystemError    = 1
	codeMessageIllegal = 13
	codeNoPermission   = 16
	codeTopicNotExist  = 17
)

// brokerCode extracts n from the client's error text "CODE: n, DESC: …" (or "CODE: n  DESC:
// …"), which is the only form in which it reports a broker's error response.
func brokerCode(err error) (int, bool) {
	if err == nil {
		return 0, false
	}
	text := err.Error()
	i := strings.Index(text, "CODE: ")
	if i < 0 {
		return 0, false
	}
	rest := text[i+len("CODE: "):]
	j := 0
	for j < len(rest) && (rest[j] == '-' && j == 0 || rest[j] >= '0' && rest[j] <= '9') {
		j++
	}
	n, perr := strconv.Atoi(rest[:j])
	if perr != nil || !strings.Contains(rest[j:], "DESC:") {
		return 0, false
	}
	return n, true
}

// needsRouteCheck reports whether err says the topic has no route (the client's "route info
// not found", when neither the topic nor the auto-create template TBW102 has one) or the
// broker does not know the topic (17). Either can be a topic that does not exist or a
// NameServer that is down or restarting, so the caller asks the NameServer before classify
// may call it permanent.
func needsRouteCheck(err error) bool {
	if err == nil {
		return false
	}
	if code, ok := brokerCode(err); ok {
		return code == codeTopicNotExist
	}
	text := err.Error()
	// This client says "route info not found"; the Java client and proxies say "No route
	// info of this topic".
	return strings.Contains(text, "route info not found") || strings.Contains(text, "No route info of this topic")
}

// routeRace reports whether err is the client's own "topic=<t> route info not found" from a
// send that found the route's queues but not yet the broker's address (see the send loop): it
// failed before any I/O.
func routeRace(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "topic=") && strings.HasSuffix(err.Error(), " route info not found")
}

// classify is the one place that decides whether retrying err can succeed: it returns err
// wrapped with sink.Permanent when it cannot, and err unchanged otherwise. A topic the
// NameServer confirmed missing (after the client's "route info not found" or a broker's
// TOPIC_NOT_EXIST, see needsRouteCheck) is wrapped with sink.TopicMissing: retryable, the
// wait bounded by the pipeline. Permanent: a message the broker calls illegal (13) or too
// large, no permission (16), an empty body or a bad topic name. Everything else is transient:
// SYSTEM_ERROR (1), SYSTEM_BUSY (2), SERVICE_NOT_AVAILABLE (14), the non-OK statuses,
// timeouts, connection errors, a missing route not confirmed by the NameServer, a cancelled
// ctx, because the same bytes can succeed once the cluster heals. An ACL rejection
// (SYSTEM_ERROR with an AclException) is transient too but wrapped with ErrAuth: it is a
// config mistake that fails every row alike, so treating it as poison would dead-letter or
// stop on good rows. The broker's text names the AccessKey and never the SecretKey (it only
// ever sees an HMAC of it), so the wrapped error is safe to log.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotSent), errors.Is(err, errClosed), errors.Is(err, errNotOK), errors.Is(err, errQueuesChanged),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Checked first: these may quote a permanent cause in their text, never in their
		// chain, and must stay retryable.
		return err
	case errors.Is(err, errTopicMissing):
		// Retryable: the topic may be created (mqadmin updateTopic) any moment; the pipeline
		// bounds the wait (retry.missing_topic_timeout).
		return sink.TopicMissing(err)
	case errors.Is(err, errTooLarge), errors.Is(err, errInvalidMessage):
		return sink.Permanent(err)
	}
	if code, ok := brokerCode(err); ok {
		switch code {
		case codeMessageIllegal, codeNoPermission:
			return sink.Permanent(err)
		case codeSystemError:
			// RocketMQ 4.x's plain ACL answers a bad AccessKey, signature or grant with
			// SYSTEM_ERROR and the exception's text.
			if strings.Contains(err.Error(), "AclException") && !errors.Is(err, ErrAuth) {
				return fmt.Errorf("%w: the broker rejected the request's ACL signature (check the sink's access_key, "+
					"secret_key or secret_key_file, and that the broker's plain_acl.yml knows that access key): %w", ErrAuth, err)
			}
		}
	}
	return err
}
