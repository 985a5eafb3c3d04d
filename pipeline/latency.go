package pipeline

// acked1 hands e to the latency observer when its last event was acknowledged: once per
// transaction, at that moment rather than when advance folds it (which may be much later,
// behind a slow or prepared transaction, and after compact merged it). Holding mu.
func (t *tracker) acked1(e *entry) {
	if e.acks > 0 && t.observe != nil {
		t.observe(e)
	}
}

// observeLatency records a fully acknowledged transaction's read→ack and commit→ack latencies.
// Called holding the tracker's mu; it only updates histograms.
func (p *Pipeline) observeLatency(e *entry) {
	p.m.TxnAcked(e.readAt, e.commitTime, e.precise, p.cfg.Now())
}
