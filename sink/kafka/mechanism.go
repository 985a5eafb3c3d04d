package kafka

import "github.com/segmentio/kafka-go/sasl"

// Mechanism returns the kafka-go SASL mechanism for a, for other clients of the same cluster
// (reconcile's reader). It errs on an unknown mechanism. Pure.
func Mechanism(a SASL) (sasl.Mechanism, error) { return a.mechanism() }
