// Package kafkago drives the consumer kit from a segmentio/kafka-go Reader: fetch, Handle, and
// commit the offset only after Handle returned nil.
package kafkago

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/consumer"
)

// Reader is what Run uses of a *kafka.Reader. The Reader must have a GroupID (CommitMessages
// needs one); CommitInterval 0, the default, makes each commit synchronous.
type Reader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Options are Run's optional settings.
type Options struct {
	// Backoff is the first wait before a message whose Handle failed is handled again; it
	// doubles up to MaxBackoff. Defaults 100 ms and 5 s.
	Backoff, MaxBackoff time.Duration
	// Handled, if set, is called after each message was handled and before its offset is
	// committed, from Run's goroutine.
	Handled func(msg consumer.Message, out consumer.Outcome)
	// Failed, if set, is called with each error of Handle (the message is then handled again),
	// from Run's goroutine.
	Failed func(msg consumer.Message, err error)
}

// Message converts a kafka-go message for Handle: the event id from the event_id header, MsgID
// "topic/partition@offset". Pure.
func Message(m kafka.Message) consumer.Message {
	msg := consumer.Message{
		MsgID:   fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset),
		Topic:   m.Topic,
		Key:     m.Key,
		Payload: m.Value,
	}
	for _, h := range m.Headers {
		msg.Headers = append(msg.Headers, consumer.Header{Key: h.Key, Value: h.Value})
		if h.Key == "event_id" && msg.EventID == "" {
			msg.EventID = string(h.Value)
		}
	}
	return msg
}

// Run fetches messages from r, handles each with kit and fn, and commits its offset only after
// Handle returned nil (processed, duplicate or rejected). It blocks until ctx is done or r
// fails, and returns that error; it is not safe to run twice on one Reader.
//
// Order per partition: messages are handled one at a time in fetch order, and a message whose
// Handle fails is handled again, with backoff, before anything after it. So no offset of a
// partition is committed past a message that has not been handled, and a later message of the
// same partition never runs before an earlier one. A poison message is the function's to mark
// Permanent; until then it holds its partition (and, the Reader being sequential, the others).
//
// At a stop or crash between Handle and the commit the message is fetched again by the next
// run, and Handle finds it marked: a duplicate, acked without running fn.
//
// Rebalances: the message in hand when its partition is revoked is still handled to the end,
// and its offset committed (kafka-go commits any partition under the current generation; the
// broker does not check the assignment). The partition's new owner starts from the last
// committed offset, so both may handle that message: the dedup insert serializes them and one
// of them acks a duplicate. The late commit can move the group's offset back (never past a
// message not handled, each commit following its partition's order): more duplicates, no loss.
func Run(ctx context.Context, r Reader, kit *consumer.Kit, fn consumer.Func, o Options) error {
	if o.Backoff <= 0 {
		o.Backoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.Backoff {
		o.MaxBackoff = max(5*time.Second, o.Backoff)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		msg := Message(m)
		wait := o.Backoff
		for {
			out, err := kit.Handle(ctx, msg, fn)
			if err == nil {
				if o.Handled != nil {
					o.Handled(msg, out)
				}
				break
			}
			if ctx.Err() != nil {
				return ctx.Err() // not committed: the next run fetches it again
			}
			if o.Failed != nil {
				o.Failed(msg, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, o.MaxBackoff)
		}
		// Only now, with the work and the mark committed, is the offset committed.
		if err := r.CommitMessages(ctx, m); err != nil {
			return fmt.Errorf("commit offset of %s: %w", msg.MsgID, err)
		}
	}
}
