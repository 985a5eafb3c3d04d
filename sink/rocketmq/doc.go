// Package rocketmq is the RocketMQ sink: it sends through rocketmq-client-go's producer, the
// messages bound for one queue as batches (SendSync with several messages), and turns the
// broker's SEND_OK into a nil error.
//
// The client's defaults do not keep outboxd's guarantees (see TRAPS.md), so the sink:
//   - treats only Status == SEND_OK as an acknowledgement: FLUSH_DISK_TIMEOUT,
//     FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE come back with a nil error from SendSync
//     but are retryable failures here, of the whole batch;
//   - turns the client's own retries off (a retry may pick another queue or broker and
//     reorder), because outboxd's pipeline retries failed messages itself, in key order;
//   - picks queues itself: FNV-1a of the key modulo the topic's writable queues (the placement
//     of the client's hash selector for a text sharding key), so one key always lands in one
//     queue, alone or in a batch; messages without a key rotate over the queues. The selector
//     finds a request's hash by the Queue of its first message, which the client copies onto
//     the batch message it builds;
//   - batches only messages bound for one queue, grouped by the queue count it last saw for
//     the topic (looked up at the NameServers before the first Send to it; until then it
//     sends one message at a time); a batch grouped for a count the selector no longer sees
//     is refused unsent and fails retryably;
//   - keeps one batch in flight per queue and at most maxLanes queues in flight per Send. A
//     batch is at most DefaultMaxBatchMessages messages and DefaultMaxBatchBytes as the broker
//     stores it (never more than MaxMessageBytes); a larger message goes alone. A failed
//     batch fails every later message of its queue unsent (nothing behind it is
//     acknowledged before it); a batch refused for good is resent one message at a time, so
//     only the refused message is permanent;
//   - gives every message its own UNIQ_KEY (the client sets one only on a message sent alone);
//   - sends batch bodies uncompressed (the client compresses only a message of 4 KiB or more
//     sent alone), so the broker's maxMessageSize applies to a batch's raw bodies;
//   - never lets a header overwrite a system property (KEYS, TAGS, DELAY, WAIT, …): such
//     headers are dropped and logged once per name;
//   - gives each producer its own instance name, so two sinks in one process never share the
//     client's per-instance state (the client keys its connections, routes and producer
//     groups by instance name);
//   - resolves NameServer host names itself (the client takes IP addresses only), at start
//     and whenever the client refreshes its NameServer list, and starts the client only once
//     a name resolves (see nsResolver).
//
// # Mapping
//
// Body is Message.Value; the KEYS property is EventID, TAGS is Tag, SHARDING_KEY is the
// message key, and every header is a user property. RocketMQ properties are text (the
// protocol's separators are the bytes 0x01 and 0x02, and a Java broker decodes them as
// UTF-8), so a value that is empty, not valid UTF-8, contains a byte 0x00–0x02, or starts with
// "base64:" is sent as "base64:" followed by its standard base64 encoding. Every other value
// is sent as is. DecodeProperties inverts this for consumers and tests. RocketMQ has no
// settable message timestamp: Message.Time is not sent (the commit time travels in no
// header either).
package rocketmq
