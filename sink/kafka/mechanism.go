package kafka

import (
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Mechanism returns the kafka-go SASL mechanism for a, for other clients of the same cluster
// (reconcile's reader). It errs on an unknown mechanism. Pure.
func Mechanism(a SASL) (sasl.Mechanism, error) { return a.mechanism() }

// Rejected describes a rejection of a's credentials by the broker and what to check, never
// with a secret, for other clients of the same cluster (sink/kafkatxn). Pure.
func (a *SASL) Rejected() string { return a.rejected() }

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
