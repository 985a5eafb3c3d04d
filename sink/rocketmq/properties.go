package rocketmq

import (
	"github.com/outboxd/outboxd/internal/rmqprops"
	"github.com/outboxd/outboxd/sink"
)

// maxPropertiesBytes is what a message's properties (UNIQ_KEY included) may take: RocketMQ
// stores their length in a signed 16-bit field (32767), in a batch item as in a request
// header; the margin leaves room for what a broker adds (CLUSTER, which 4.9 appends to each
// message of a batch).
const maxPropertiesBytes = 32767 - 64

// DecodeProperties inverts the sink's mapping (rmqprops) for a consumer of the messages it
// sent: key is the message key (nil when the message had none), headers are the user
// properties sorted by name, decoded; system properties are left out. It errs on a malformed
// encoded value. It does not block and is safe for concurrent use.
func DecodeProperties(props map[string]string) (key []byte, headers []sink.Header, err error) {
	key, hs, err := rmqprops.Decode(props)
	if err != nil {
		return nil, nil, err
	}
	for _, h := range hs {
		headers = append(headers, sink.Header(h))
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
