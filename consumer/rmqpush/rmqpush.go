// Package rmqpush drives the consumer kit from an apache/rocketmq-client-go v2 push consumer:
// ConsumeSuccess only after Handle returned nil, ConsumeRetryLater otherwise.
package rmqpush

import (
	"context"
	"database/sql"
	"fmt"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/internal/rmqprops"
)

// Options are the optional settings of Listener.
type Options struct {
	// Orderly must match the push consumer's consumer.WithConsumerOrder(true): an orderly
	// consumer treats ConsumeRetryLater as neither success nor retry (the client drops the
	// messages from its queue without committing them, until the next rebalance), so for it a
	// failure returns SuspendCurrentQueueAMoment, which retries the same messages in place.
	Orderly bool
	// Handled and Failed, if set, are called after each message's Handle, from the client's
	// consume goroutine.
	Handled func(msg consumer.Message, out consumer.Outcome)
	Failed  func(msg consumer.Message, err error)
}

// Message converts a delivered RocketMQ message for Handle, undoing outboxd's property
// encoding ("base64:" values): the event id from the event_id property (a header outboxd sets
// on every message), else from KEYS; Key from SHARDING_KEY; Headers the user properties,
// decoded, without RocketMQ's own; MsgID the message id. A property that does not decode is
// returned as an error, with the rest of msg filled as far as it could be. Pure.
func Message(m *primitive.MessageExt) (consumer.Message, error) {
	msg := consumer.Message{MsgID: m.MsgId, Topic: m.Topic, Payload: m.Body}
	// The event id on its own, so that a message with another bad property is still marked
	// REJECTED under its event's id.
	var idErr error
	for _, p := range [...]string{"event_id", primitive.PropertyKeys} {
		v := m.GetProperty(p)
		if v == "" {
			continue
		}
		// KEYS is a system property, which rmqprops.Decode leaves out: decode as a header.
		if _, h, err := rmqprops.Decode(map[string]string{"event_id": v}); err != nil {
			msg.EventID, idErr = v, fmt.Errorf("%s: %w", p, err) // as it stands: the bad message can still be marked
		} else {
			msg.EventID, idErr = string(h[0].Value), nil
		}
		if msg.EventID != "" {
			break
		}
	}
	key, hs, err := rmqprops.Decode(m.GetProperties())
	if err == nil {
		err = idErr
	}
	if err != nil {
		return msg, fmt.Errorf("message %s: %w", m.MsgId, err)
	}
	msg.Key = key
	for _, h := range hs {
		msg.Headers = append(msg.Headers, consumer.Header{Key: h.Key, Value: h.Value})
	}
	return msg, nil
}

// Listener returns the function to pass to the push consumer's Subscribe. It handles the
// messages of a delivery one by one with kit and fn and returns ConsumeSuccess only when every
// one of them returned nil from Handle (processed, duplicate or rejected). On the first error it
// stops and returns ConsumeRetryLater (SuspendCurrentQueueAMoment when o.Orderly): the client
// sends the messages back to the group's retry topic (%RETRY%group) or, orderly, delivers them
// again in place; the ones handled before are then duplicates, acked without the work. A message
// whose properties do not decode is rejected (marked and quarantined), not retried.
//
// A concurrent push consumer gives up on a message after MaxReconsumeTimes (16 by default) and
// moves it to the dead-letter topic %DLQ%group; the kit has no mark for it then, so replaying
// it from there processes it once. It is safe for concurrent use, as the client calls it.
func Listener(kit *consumer.Kit, fn consumer.Func, o Options) func(context.Context, ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
	retry := rmqconsumer.ConsumeRetryLater
	if o.Orderly {
		retry = rmqconsumer.SuspendCurrentQueueAMoment
	}
	return func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		for _, m := range msgs {
			msg, decodeErr := Message(m)
			work := fn
			if decodeErr != nil {
				work = func(context.Context, *sql.Tx, consumer.Message) error { return consumer.Permanent(decodeErr) }
			}
			out, err := kit.Handle(ctx, msg, work)
			if err != nil {
				if o.Failed != nil {
					o.Failed(msg, err)
				}
				return retry, err
			}
			if o.Handled != nil {
				o.Handled(msg, out)
			}
		}
		return rmqconsumer.ConsumeSuccess, nil
	}
}
