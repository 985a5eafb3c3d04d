// Package metrics registers every outboxd metric in one place, on a private Prometheus
// registry, and keeps the small amount of shared progress state the lag gauges are computed
// from at scrape time.
//
// Every method of *Metrics is nil-safe: a nil *Metrics is a no-op, so components and their tests
// need no registry. All methods are safe for concurrent use.
package metrics

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Label values of outboxd_dead_letters_total and outboxd_events_failed_total.
const (
	ReasonNoRoute   = "no_route"
	ReasonMalformed = "malformed"
	ReasonRejected  = "rejected"
	// ReasonTopicMissing: the row's topic did not appear within retry.missing_topic_timeout,
	// or --dead-letter-event diverted a row waiting for it.
	ReasonTopicMissing = "topic_missing"

	KindTransient = "transient"
	KindPermanent = "permanent"
	// KindTopicMissing: retryable, the topic does not exist (yet).
	KindTopicMissing = "topic_missing"

	// RouteDeadLetter is the route label of dead letters.
	RouteDeadLetter = "dead_letter"
)

// Pipeline is the view of the running pipeline the gauges read at scrape time;
// *pipeline.Pipeline implements it. Its methods must be safe for concurrent use.
type Pipeline interface {
	// Oldest reports the commit time and the read time of the oldest transaction not yet fully
	// acknowledged; ok is false when every transaction read was acknowledged.
	Oldest() (commit, read time.Time, ok bool)
	// InFlight reports the events and bytes read but not yet acknowledged.
	InFlight() (events, bytes int)
}

// PreparedXA is implemented by a Pipeline that holds prepared XA transactions until their
// XA COMMIT (*pipeline.Pipeline); the XA gauges read 0 for a Pipeline without it.
type PreparedXA interface {
	// PreparedXA reports how many prepared XA transactions wait for their XA COMMIT or
	// XA ROLLBACK and the prepare time of the oldest (zero when none).
	PreparedXA() (n int, oldest time.Time)
}

// Options configure New. The zero value works.
type Options struct {
	// Version is the build's version, for outboxd_build_info.
	Version string
	// Now is the clock of the age and lag gauges; nil means time.Now.
	Now func() time.Time
	// HeartbeatPeriod is how often an idle source sends a replication heartbeat. A stream that
	// was caught up at its last heartbeat counts as caught up for 3 periods; after that its lag
	// grows from that heartbeat. Default 5s.
	HeartbeatPeriod time.Duration
}

// Metrics holds the metric handles and the progress state behind the computed gauges.
type Metrics struct {
	reg             *prometheus.Registry
	now             func() time.Time
	heartbeatPeriod time.Duration

	binlogEvents    prometheus.Counter
	binlogBytes     prometheus.Counter
	heartbeats      prometheus.Counter
	txnsSkipped     prometheus.Counter
	eventsRead      *prometheus.CounterVec
	delivered       *prometheus.CounterVec
	failed          *prometheus.CounterVec
	deadLetters     *prometheus.CounterVec
	sendDuration    *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	checkpointSaves prometheus.Counter
	checkpointFails prometheus.Counter
	checkpointTS    prometheus.Gauge
	sourceConnected prometheus.Gauge
	sinkUp          *prometheus.GaugeVec
	topicMissing    *prometheus.GaugeVec
	txnsBehind      prometheus.Gauge

	mu   sync.Mutex
	src  sourceState
	pipe Pipeline
	// savedAt and commitAt describe the newest checkpoint written (or loaded at start).
	savedAt, commitAt time.Time
	sinks             map[string]SinkState
	behind            Behind
	tables            map[tableKey]prometheus.Counter
}

type tableKey struct{ schema, table string }

// sourceState is what the binlog reader reported.
type sourceState struct {
	connected     bool
	connErr       string
	newestCommit  time.Time // commit time of the newest complete transaction read
	readSeq       uint64    // complete transactions read
	heartbeatSeq  uint64    // readSeq when the last heartbeat arrived
	lastHeartbeat time.Time // zero before the first heartbeat
}

// SinkState is the latest known reachability of one sink, from its sends or probes.
type SinkState struct {
	Up bool `json:"up"`
	// At is when it was observed.
	At time.Time `json:"at"`
	// Error is the failure that set Up to false, "" when up.
	Error string `json:"error,omitempty"`
}

// Behind is the latest sample of how far the checkpoint is behind the server.
type Behind struct {
	// Transactions the server executed that are not yet acknowledged; -1 before the first sample.
	Transactions int64 `json:"transactions"`
	// Rate is transactions acknowledged per second over the last sample interval.
	Rate float64 `json:"rate_per_second"`
	// At is when it was sampled.
	At time.Time `json:"at"`
}

// New creates the metrics and registers them, with the Go runtime and process collectors and
// outboxd_build_info, on a new private registry. It does not block.
func New(o Options) *Metrics {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HeartbeatPeriod <= 0 {
		o.HeartbeatPeriod = 5 * time.Second
	}
	m := &Metrics{
		reg:             prometheus.NewRegistry(),
		now:             o.Now,
		heartbeatPeriod: o.HeartbeatPeriod,
		sinks:           map[string]SinkState{},
		behind:          Behind{Transactions: -1},
		tables:          map[tableKey]prometheus.Counter{},
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m.binlogEvents = counter("outboxd_binlog_events_read_total", "Binlog events received (all types).")
	m.binlogBytes = counter("outboxd_binlog_bytes_read_total", "Bytes of binlog events received.")
	m.heartbeats = counter("outboxd_heartbeats_received_total", "Replication heartbeats received from the source.")
	m.txnsSkipped = counter("outboxd_transactions_skipped_total",
		"Transactions the source streamed although the start position already covered them; skipped, not delivered again.")
	m.eventsRead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_events_read_total", Help: "Outbox rows read (INSERTs into outbox tables), by table (schema.table).",
	}, []string{"table"})
	m.delivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_events_delivered_total",
		Help: "Messages acknowledged by the broker, by sink and route index (\"dead_letter\" for dead letters).",
	}, []string{"sink", "route"})
	m.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_events_failed_total",
		Help: "Failed send attempts of messages, by sink, route and kind (transient, permanent or topic_missing).",
	}, []string{"sink", "route", "kind"})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_dead_letters_total", Help: "Rows dead-lettered, by reason (no_route, malformed, rejected, topic_missing).",
	}, []string{"reason"})
	m.sendDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "outboxd_send_duration_seconds",
		Help:    "Duration of one Sink.Send call.",
		Buckets: prometheus.ExponentialBucketsRange(0.0005, 10, 16),
	}, []string{"sink"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_send_retries_total", Help: "Resends after a failed Send.",
	}, []string{"sink"})
	m.checkpointSaves = counter("outboxd_checkpoint_saves_total", "Checkpoints written.")
	m.checkpointFails = counter("outboxd_checkpoint_save_failures_total",
		"Checkpoint writes that failed (each is retried; saves failing for 30 s stop outboxd).")
	m.checkpointTS = gauge("outboxd_checkpoint_commit_timestamp_seconds", "Commit time (unix seconds) of the newest checkpointed transaction.")
	m.sourceConnected = gauge("outboxd_source_connected", "1 while the binlog stream is connected and streaming.")
	m.sinkUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outboxd_sink_up", Help: "1 when the sink's last send or probe succeeded, 0 after a failure.",
	}, []string{"sink"})
	m.topicMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outboxd_topic_missing",
		Help: "1 while messages wait for a topic the broker says does not exist (retried until retry.missing_topic_timeout); absent otherwise.",
	}, []string{"sink", "topic"})
	m.txnsBehind = gauge("outboxd_transactions_behind",
		"Transactions the server executed that outboxd has not yet acknowledged (GTID difference, sampled every 5 s).")
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outboxd_build_info", Help: "Always 1; labels say the version and the Go version.",
	}, []string{"version", "goversion"})
	version := o.Version
	if version == "" {
		version = "dev"
	}
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)

	computed := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_inflight_events", Help: "Events read but not yet acknowledged.",
		}, func() float64 { e, _ := m.inFlight(); return float64(e) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_inflight_bytes", Help: "Bytes of the events read but not yet acknowledged.",
		}, func() float64 { _, b := m.inFlight(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_lag_seconds",
			Help: "Now minus the commit time of the oldest transaction not yet acknowledged (or of the newest read); 0 when caught up.",
		}, func() float64 { return m.Lag().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_oldest_unacked_event_age_seconds", Help: "Now minus the read time of the oldest unacknowledged event; 0 if none.",
		}, func() float64 { return m.Lag().OldestUnacked.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_checkpoint_age_seconds", Help: "Now minus the time the last checkpoint was saved.",
		}, func() float64 { return m.checkpointAge().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_xa_prepared_transactions",
			Help: "Prepared XA transactions whose XA COMMIT or XA ROLLBACK has not been read yet; each holds the checkpoint before its XA PREPARE.",
		}, func() float64 { n, _ := m.preparedXA(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_xa_oldest_prepared_age_seconds",
			Help: "Now minus the binlog time of the oldest prepared XA transaction not yet committed or rolled back; 0 if none. The checkpoint cannot pass it.",
		}, func() float64 { _, age := m.preparedXA(); return age.Seconds() }),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		m.binlogEvents, m.binlogBytes, m.heartbeats, m.eventsRead, m.delivered, m.failed,
		m.deadLetters, m.sendDuration, m.retries, m.checkpointSaves, m.checkpointFails, m.checkpointTS,
		m.sourceConnected, m.sinkUp, m.topicMissing, m.txnsBehind, m.txnsSkipped,
	)
	m.reg.MustRegister(computed...)
	// Counters start at 0 rather than appear at their first increment, so rate() and
	// increase() see that first increment (a series born at 1 shows no increase).
	for _, r := range []string{ReasonNoRoute, ReasonMalformed, ReasonRejected, ReasonTopicMissing} {
		m.deadLetters.WithLabelValues(r)
	}
	return m
}

// DeclareSink creates sink's labelled series at 0 (deliveries and failures for each of routes,
// retries, the send histogram), so the first increment is visible to rate() and increase().
// routes are route labels: route indexes as text and RouteDeadLetter.
func (m *Metrics) DeclareSink(sink string, routes []string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(sink)
	m.sendDuration.WithLabelValues(sink)
	for _, r := range routes {
		m.delivered.WithLabelValues(sink, r)
		m.failed.WithLabelValues(sink, r, KindTransient)
		m.failed.WithLabelValues(sink, r, KindPermanent)
		m.failed.WithLabelValues(sink, r, KindTopicMissing)
	}
}

// Registry returns the private registry to serve, or nil for a nil *Metrics.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// --- binlog reader ---

// SourceConnected records whether the binlog stream is connected and streaming; err says why
// not (nil when connected, or when it was a requested stop).
func (m *Metrics) SourceConnected(up bool, err error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.src.connected = up
	m.src.connErr = ""
	if err != nil && !up {
		m.src.connErr = err.Error()
	}
	m.mu.Unlock()
	if up {
		m.sourceConnected.Set(1)
	} else {
		m.sourceConnected.Set(0)
	}
}

// BinlogEvent counts one binlog event of size bytes received from the source.
func (m *Metrics) BinlogEvent(size int) {
	if m == nil {
		return
	}
	m.binlogEvents.Inc()
	m.binlogBytes.Add(float64(size))
}

// Heartbeat records a replication heartbeat: the server had nothing newer to send.
func (m *Metrics) Heartbeat() {
	if m == nil {
		return
	}
	m.heartbeats.Inc()
	now := m.now()
	m.mu.Lock()
	m.src.lastHeartbeat = now
	m.src.heartbeatSeq = m.src.readSeq
	m.mu.Unlock()
}

// TxnRead records that the reader completed a transaction committed at commit.
func (m *Metrics) TxnRead(commit time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.src.readSeq++
	if commit.After(m.src.newestCommit) {
		m.src.newestCommit = commit
	}
	m.mu.Unlock()
}

// TxnSkipped counts a transaction the reader skipped because the start position covers it.
func (m *Metrics) TxnSkipped() {
	if m == nil {
		return
	}
	m.txnsSkipped.Inc()
}

// Source reports whether the stream is connected, and the last connection error otherwise.
func (m *Metrics) Source() (connected bool, lastErr string) {
	if m == nil {
		return false, ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.src.connected, m.src.connErr
}

// --- pipeline ---

// SetPipeline makes the computed gauges read p (the running pipeline; nil for none).
func (m *Metrics) SetPipeline(p Pipeline) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.pipe = p
	m.mu.Unlock()
}

// EventsRead counts n outbox rows read from schema.table.
func (m *Metrics) EventsRead(schema, table string, n int) {
	if m == nil || n == 0 {
		return
	}
	k := tableKey{schema, table}
	m.mu.Lock()
	c, ok := m.tables[k]
	if !ok {
		// Cached so the hot path does not build "schema.table" for every row.
		c = m.eventsRead.WithLabelValues(schema + "." + table)
		m.tables[k] = c
	}
	m.mu.Unlock()
	c.Add(float64(n))
}

// Delivered counts n messages of route acknowledged by sink.
func (m *Metrics) Delivered(sink, route string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.delivered.WithLabelValues(sink, route).Add(float64(n))
}

// Failed counts n failed send attempts of messages of route on sink; kind is KindTransient,
// KindPermanent or KindTopicMissing.
func (m *Metrics) Failed(sink, route, kind string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.failed.WithLabelValues(sink, route, kind).Add(float64(n))
}

// TopicMissing sets outboxd_topic_missing{sink,topic} to 1 while messages wait for the topic
// (missing), and removes the series when none does.
func (m *Metrics) TopicMissing(sink, topic string, missing bool) {
	if m == nil {
		return
	}
	if missing {
		m.topicMissing.WithLabelValues(sink, topic).Set(1)
	} else {
		m.topicMissing.DeleteLabelValues(sink, topic)
	}
}

// DeadLettered counts one row dead-lettered for reason (ReasonNoRoute, ReasonMalformed,
// ReasonRejected, ReasonTopicMissing).
func (m *Metrics) DeadLettered(reason string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(reason).Inc()
}

// SendDuration observes one Send call to sink.
func (m *Metrics) SendDuration(sink string, d time.Duration) {
	if m == nil {
		return
	}
	m.sendDuration.WithLabelValues(sink).Observe(d.Seconds())
}

// Retry counts one resend to sink after a failed Send.
func (m *Metrics) Retry(sink string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(sink).Inc()
}

// SinkResult records the outcome of a send or probe of sink: nil err means reachable.
func (m *Metrics) SinkResult(sink string, err error) {
	if m == nil {
		return
	}
	st := SinkState{Up: err == nil, At: m.now()}
	if err != nil {
		st.Error = err.Error()
	}
	m.mu.Lock()
	m.sinks[sink] = st
	m.mu.Unlock()
	if st.Up {
		m.sinkUp.WithLabelValues(sink).Set(1)
	} else {
		m.sinkUp.WithLabelValues(sink).Set(0)
	}
}

// Sinks returns the latest state of every sink that has one.
func (m *Metrics) Sinks() map[string]SinkState {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]SinkState, len(m.sinks))
	for k, v := range m.sinks {
		out[k] = v
	}
	return out
}

// CheckpointSaved records a checkpoint written at savedAt, covering transactions up to one
// committed at commit (zero when unknown).
func (m *Metrics) CheckpointSaved(savedAt, commit time.Time) {
	if m == nil {
		return
	}
	m.checkpointSaves.Inc()
	m.CheckpointLoaded(savedAt, commit)
}

// CheckpointSaveFailed counts a checkpoint write that failed. Safe for concurrent use.
func (m *Metrics) CheckpointSaveFailed() {
	if m == nil {
		return
	}
	m.checkpointFails.Inc()
}

// CheckpointLoaded records the checkpoint found at start, without counting a save.
func (m *Metrics) CheckpointLoaded(savedAt, commit time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.savedAt = savedAt
	if !commit.IsZero() {
		m.commitAt = commit
	}
	m.mu.Unlock()
	if !commit.IsZero() {
		m.checkpointTS.Set(float64(commit.UnixNano()) / 1e9)
	}
}

// Checkpoint reports when the last checkpoint was saved and the commit time it covers.
func (m *Metrics) Checkpoint() (savedAt, commit time.Time) {
	if m == nil {
		return time.Time{}, time.Time{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.savedAt, m.commitAt
}

// SetBehind records a sample of the transactions the server has that are not yet acknowledged.
func (m *Metrics) SetBehind(b Behind) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.behind = b
	m.mu.Unlock()
	m.txnsBehind.Set(float64(b.Transactions))
}

// LastBehind returns the latest sample (Transactions -1 before the first).
func (m *Metrics) LastBehind() Behind {
	if m == nil {
		return Behind{Transactions: -1}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.behind
}

// --- computed gauges ---

func (m *Metrics) inFlight() (events, bytes int) {
	m.mu.Lock()
	p := m.pipe
	m.mu.Unlock()
	if p == nil {
		return 0, 0
	}
	return p.InFlight()
}

func (m *Metrics) preparedXA() (n int, age time.Duration) {
	m.mu.Lock()
	p := m.pipe
	m.mu.Unlock()
	x, ok := p.(PreparedXA)
	if !ok {
		return 0, 0
	}
	n, oldest := x.PreparedXA()
	if n == 0 || oldest.IsZero() {
		return n, 0
	}
	return n, max(0, m.now().Sub(oldest))
}

func (m *Metrics) checkpointAge() time.Duration {
	m.mu.Lock()
	saved := m.savedAt
	m.mu.Unlock()
	if saved.IsZero() {
		return 0
	}
	return max(0, m.now().Sub(saved))
}

// Lag computes the lag gauges now, from timestamps only, so they grow while the pipeline is
// stuck even when nothing new arrives.
func (m *Metrics) Lag() LagResult {
	if m == nil {
		return LagResult{}
	}
	m.mu.Lock()
	in := LagInput{
		Now:             m.now(),
		NewestCommit:    m.src.newestCommit,
		ReadSeq:         m.src.readSeq,
		HeartbeatSeq:    m.src.heartbeatSeq,
		LastHeartbeat:   m.src.lastHeartbeat,
		HeartbeatPeriod: m.heartbeatPeriod,
	}
	p := m.pipe
	m.mu.Unlock()
	if p != nil {
		in.OldestCommit, in.OldestRead, in.Pending = p.Oldest()
	}
	return ComputeLag(in)
}
