package rocketmq

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/sink"
)

// encodedPrefix marks a property value that is the base64 of the original bytes.
const encodedPrefix = "base64:"

// maxPropertiesBytes is what a message's properties (UNIQ_KEY included) may take: RocketMQ
// stores their length in a signed 16-bit field (32767), in a batch item as in a request
// header; the margin leaves room for what a broker adds (CLUSTER, which 4.9 appends to each
// message of a batch).
const maxPropertiesBytes = 32767 - 64

// systemProperties are RocketMQ's own property names: the client's primitive constants plus
// the ones a Java broker, proxy or consumer sets (MessageConst). A header with one of these
// names would change how the broker treats the message (DELAY delays it, WAIT=false skips the
// store wait, TRAN_MSG makes it a half message, …) or would overwrite KEYS/TAGS, so it is
// never sent. Every name starting with "__" is reserved too (Java's internal properties).
func isSystemProperty(name string) bool {
	if strings.HasPrefix(name, "__") {
		return true
	}
	switch name {
	case primitive.PropertyKeys, primitive.PropertyTags, primitive.PropertyWaitStoreMsgOk,
		primitive.PropertyDelayTimeLevel, primitive.PropertyRetryTopic, primitive.PropertyTimerDeliverMS,
		primitive.PropertyRealTopic, primitive.PropertyRealQueueId, primitive.PropertyTransactionPrepared,
		primitive.PropertyProducerGroup, primitive.PropertyMinOffset, primitive.PropertyMaxOffset,
		primitive.PropertyBuyerId, primitive.PropertyOriginMessageId, primitive.PropertyTransferFlag,
		primitive.PropertyCorrectionFlag, primitive.PropertyMQ2Flag, primitive.PropertyReconsumeTime,
		primitive.PropertyMsgRegion, primitive.PropertyTraceSwitch, primitive.PropertyUniqueClientMessageIdKeyIndex,
		primitive.PropertyMaxReconsumeTimes, primitive.PropertyConsumeStartTime,
		primitive.PropertyTranscationPreparedQueueOffset, primitive.PropertyTranscationCheckTimes,
		primitive.PropertyCheckImmunityTimeInSeconds, primitive.PropertyShardingKey,
		primitive.PropertyTransactionID, primitive.PropertyCorrelationID, primitive.PropertyMessageReplyToClient,
		primitive.PropertyMessageTTL, primitive.PropertyReplyMessageArriveTime, primitive.PropertyMsgType,
		primitive.PropertyCluster,
		// Java's MessageConst names the Go client does not define.
		"INSTANCE_ID", "PUSH_REPLY_TIME", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM",
		"TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "BORNHOST", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
		"TRACE_CONTEXT", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME":
		return true
	}
	return false
}

// PropertyNameProblem says why a header named name cannot be a user property of a RocketMQ
// message, so the sink drops it, or "" when it can: for config validation of the header
// names outboxd is told to place (tables[].extra_headers). Pure.
func PropertyNameProblem(name string) string {
	switch {
	case !validPropertyName(name):
		return "is not text a RocketMQ property name can carry"
	case isSystemProperty(name):
		return "is a RocketMQ system property"
	}
	return ""
}

// validPropertyName reports whether name survives the properties encoding: non-empty text
// without the protocol's separator bytes.
func validPropertyName(name string) bool {
	return name != "" && utf8.ValidString(name) && !strings.ContainsAny(name, "\x00\x01\x02")
}

// encodeValue returns b as a property value: as is when it is plain text, otherwise (and for
// the empty value, which RocketMQ 4.x drops, and for text that already looks encoded) as
// "base64:" + base64(b), so that every value round-trips through DecodeProperties.
func encodeValue(b []byte) string {
	if len(b) > 0 && utf8.Valid(b) && !strings.ContainsAny(string(b), "\x00\x01\x02") &&
		!strings.HasPrefix(string(b), encodedPrefix) {
		return string(b)
	}
	return encodedPrefix + base64.StdEncoding.EncodeToString(b)
}

// decodeValue inverts encodeValue.
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

// DecodeProperties inverts the sink's mapping for a consumer of the messages it sent: key is
// the message key (nil when the message had none), headers are the user properties sorted by
// name, decoded; system properties are left out. It errs on a malformed encoded value. It does
// not block and is safe for concurrent use.
func DecodeProperties(props map[string]string) (key []byte, headers []sink.Header, err error) {
	if v, ok := props[primitive.PropertyShardingKey]; ok {
		if key, err = decodeValue(v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", primitive.PropertyShardingKey, err)
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		if !isSystemProperty(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v, err := decodeValue(props[name])
		if err != nil {
			return nil, nil, fmt.Errorf("header %q: %w", name, err)
		}
		headers = append(headers, sink.Header{Key: name, Value: v})
	}
	return key, headers, nil
}

// propertiesSize is the length of props in RocketMQ's "name\x01value\x02" encoding.
func propertiesSize(props map[string]string) int {
	n := 0
	for k, v := range props {
		n += len(k) + len(v) + 2
	}
	return n
}
