package metrics

import "github.com/prometheus/client_golang/prometheus"

// Transaction results, the result label of outboxd_kafka_transactions_total.
const (
	TxnCommitted = "committed"
	TxnAborted   = "aborted"
)

// kafkaTxnMetrics are exactly-once delivery's (delivery: exactly_once): the Kafka transactions
// ended and the broker's refusals of a fenced producer.
type kafkaTxnMetrics struct {
	txns   *prometheus.CounterVec
	fenced *prometheus.CounterVec
}

func newKafkaTxnMetrics(reg *prometheus.Registry) *kafkaTxnMetrics {
	k := &kafkaTxnMetrics{
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_kafka_transactions_total",
			Help: "Kafka transactions ended (delivery: exactly_once), by sink (checkpoint.sink) and result (committed or aborted). Each commit carries its checkpoint record; an abort makes outboxd stream again from the last committed checkpoint.",
		}, []string{"sink", "result"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_kafka_fenced_total",
			Help: "Sends or commits the broker refused because a newer producer took this process's transactional id (delivery: exactly_once): another outboxd leads now, and this one stops sending.",
		}, []string{"sink"}),
	}
	reg.MustRegister(k.txns, k.fenced)
	return k
}

// DeclareKafkaTxn makes the exactly-once series of sink start at 0. Safe for concurrent use.
func (m *Metrics) DeclareKafkaTxn(sink string) {
	if m == nil {
		return
	}
	m.ktxn.txns.WithLabelValues(sink, TxnCommitted)
	m.ktxn.txns.WithLabelValues(sink, TxnAborted)
	m.ktxn.fenced.WithLabelValues(sink)
}

// KafkaTxnEnded counts one Kafka transaction of sink ended with commit or abort. Safe for
// concurrent use.
func (m *Metrics) KafkaTxnEnded(sink string, committed bool) {
	if m == nil {
		return
	}
	r := TxnAborted
	if committed {
		r = TxnCommitted
	}
	m.ktxn.txns.WithLabelValues(sink, r).Inc()
}

// KafkaFenced counts one refusal of sink's producer by the broker for fencing. Safe for
// concurrent use.
func (m *Metrics) KafkaFenced(sink string) {
	if m == nil {
		return
	}
	m.ktxn.fenced.WithLabelValues(sink).Inc()
}
