package kafka

import (
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Mechanism returns the kafka-go SASL mechanism for a, for other clients of the same cluster
// (reconcile's reader). It errs on an unknown mechanism. Pure.
func Mechanism(a SASL) (sasl.Mechanism, error) { return a.mechanism() }

// Codec returns the record batch compression named as in sinks.<name>.compression: "none"
// (or empty), "gzip", "snappy", "lz4" or "zstd". Pure.
func Codec(name string) (kafkago.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafkago.Gzip, nil
	case "snappy":
		return kafkago.Snappy, nil
	case "lz4":
		return kafkago.Lz4, nil
	case "zstd":
		return kafkago.Zstd, nil
	}
	return 0, fmt.Errorf("compression %q: use none, gzip, snappy, lz4 or zstd", name)
}
