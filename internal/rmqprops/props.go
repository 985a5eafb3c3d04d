// Package rmqprops is how outboxd carries a message's key and headers in RocketMQ message
// properties, shared by the sink that writes them (sink/rocketmq), the consumer kit that
// reads them (consumer/rmqpush), reconcile, and config, which refuses header names the sink
// would drop. It is a leaf (standard library only): the RocketMQ client's property names it
// needs are spelled out here, and sink/rocketmq's tests hold them equal to the client's.
package rmqprops

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// encodedPrefix marks a property value that is the base64 of the original bytes.
const encodedPrefix = "base64:"

// ShardingKey is the property that carries the message key (the client's
// primitive.PropertyShardingKey).
const ShardingKey = "SHARDING_KEY"

// IsSystem reports whether name is one of RocketMQ's own property names: the client's
// primitive constants plus the ones a Java broker, proxy or consumer sets (MessageConst). A
// header with one of these names would change how the broker treats the message (DELAY
// delays it, WAIT=false skips the store wait, TRAN_MSG makes it a half message, …) or would
// overwrite KEYS/TAGS, so it is never sent. Every name starting with "__" is reserved too
// (Java's internal properties). Pure.
func IsSystem(name string) bool {
	if strings.HasPrefix(name, "__") {
		return true
	}
	switch name {
	// The Go client's primitive.Property* constants.
	case "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "TIMER_DELIVER_MS", "REAL_TOPIC", "REAL_QID",
		"TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
		"TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON",
		"UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
		"TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", ShardingKey,
		"__transactionId__", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "MSG_TYPE",
		"CLUSTER",
		// Java's MessageConst names the Go client does not define.
		"INSTANCE_ID", "PUSH_REPLY_TIME", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM",
		"TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "BORNHOST", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
		"TRACE_CONTEXT", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME":
		return true
	}
	return false
}

// NameProblem says why a header named name cannot be a user property of a RocketMQ message,
// so the sink drops it, or "" when it can: for the sink and for config validation of the
// header names outboxd is told to place (tables[].extra_headers). Pure.
func NameProblem(name string) string {
	switch {
	case !validName(name):
		return "is not text a RocketMQ property name can carry"
	case IsSystem(name):
		return "is a RocketMQ system property"
	}
	return ""
}

// validName reports whether name survives the properties encoding: non-empty text without
// the protocol's separator bytes.
func validName(name string) bool {
	return name != "" && utf8.ValidString(name) && !strings.ContainsAny(name, "\x00\x01\x02")
}

// EncodeValue returns b as a property value: as is when it is plain text, otherwise (and for
// the empty value, which RocketMQ 4.x drops, and for text that already looks encoded) as
// "base64:" + base64(b), so that every value round-trips through Decode. Pure.
func EncodeValue(b []byte) string {
	if len(b) > 0 && utf8.Valid(b) && !strings.ContainsAny(string(b), "\x00\x01\x02") &&
		!strings.HasPrefix(string(b), encodedPrefix) {
		return string(b)
	}
	return encodedPrefix + base64.StdEncoding.EncodeToString(b)
}

// decodeValue inverts EncodeValue.
func decodeValue(v string) ([]byte, error) {
	rest, ok := strings.CutPrefix(v, encodedPrefix)
	if !ok {
		return []byte(v), nil
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("property value %q: bad base64: %w", v, err)
	}
	return b, nil
}

// Header is one decoded user property.
type Header struct {
	Key   string
	Value []byte
}

// Decode inverts the sink's mapping for a consumer of the messages it sent: key is the
// message key (nil when the message had none), headers are the user properties sorted by
// name, decoded; system properties are left out. It errs on a malformed encoded value. It does
// not block and is safe for concurrent use.
func Decode(props map[string]string) (key []byte, headers []Header, err error) {
	if v, ok := props[ShardingKey]; ok {
		if key, err = decodeValue(v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", ShardingKey, err)
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		if !IsSystem(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v, err := decodeValue(props[name])
		if err != nil {
			return nil, nil, fmt.Errorf("header %q: %w", name, err)
		}
		headers = append(headers, Header{Key: name, Value: v})
	}
	return key, headers, nil
}
