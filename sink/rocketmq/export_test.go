package rocketmq

import (
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/sink"
)

// WireProperties is the properties string the sink sends for m (as build encodes it, in the
// client's "name\x01value\x02" form), for the consumer kit's round-trip test in package
// rocketmq_test (which may import consumer/rmqpush; this package may not).
func WireProperties(m *sink.Message) (string, error) {
	s := &Sink{cfg: Config{MaxMessageBytes: DefaultMaxMessageBytes}, log: zerolog.Nop()}
	pm, _, err := s.build(0, m)
	if err != nil {
		return "", err
	}
	return pm.MarshallProperties(), nil
}
