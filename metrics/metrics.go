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
	"sync/atomic"
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

	// RouteDeadLetter is the route label of dead letters (config.RouteLabelDeadLetter).
	RouteDeadLetter = "dead_letter"
	// RouteNone is the route label of the per-table dead letters of rows no route took: no
	// route matched, or the row was malformed before one could (config.RouteLabelNone).
	RouteNone = "none"
)

// Buckets are the histogram buckets of the durations outboxd measures, in seconds: the 1-2.5-5
// steps of Prometheus' own defaults, from 1 ms to 10 s. Round bounds put the thresholds people
// write SLOs and alerts in (100 ms, 1 s) exactly on a bucket, so `le="0.1"` exists and a
// fraction under it is exact, not interpolated; and the 2.5x steps bound the error of a
// histogram_quantile to a bucket's width at every scale.
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// latencyBuckets extend Buckets to 10 minutes for the end-to-end latencies, which include
// waits for a broker that is away and catch-up after a restart.
var latencyBuckets = append(append([]float64(nil), Buckets...), 30, 60, 120, 300, 600)

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
	// LockName is ha.lock_name with ha enabled: outboxd_leader and outboxd_leader_epoch carry
	// it as label lock_name, so alerts can count the leaders of one pipeline.
	LockName string
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
	outboxUpdates   *prometheus.CounterVec
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
	reconnects      prometheus.Counter
	leader          prometheus.Gauge
	leaderEpoch     prometheus.Gauge
	fences          prometheus.Counter
	missingTxns     prometheus.Counter
	limitEvents     prometheus.Gauge
	limitBytes      prometheus.Gauge
	readToAck       prometheus.Histogram
	commitToAck     prometheus.Histogram
	tableDelivered  *prometheus.CounterVec
	tableDead       *prometheus.CounterVec
	binlogRetention prometheus.Gauge
	clockOffset     prometheus.Gauge
	rec             reconcileMetrics
	cleanup         *cleanupMetrics
	ktxn            *kafkaTxnMetrics

	mu   sync.Mutex
	src  sourceState
	pipe Pipeline
	// savedAt and commitAt describe the newest checkpoint written (or loaded at start).
	savedAt, commitAt time.Time
	sinks             map[string]SinkState
	behind            Behind
	tables            map[tableKey]prometheus.Counter
	// standby is set while this process does not lead (SetLeader): its lag is 0.
	standby bool
	// retention is the server's binlog retention (0: never purged, or unknown) and
	// oldestBinlog the creation time of its oldest binlog (zero before the first sample).
	retention    time.Duration
	oldestBinlog time.Time
	// srcOffset is the source's clock minus this host's in nanoseconds, as last sampled
	// (SetSourceClockOffset): the commit and binlog times the age gauges compare with this
	// host's clock are the source's. Atomic, not under mu: TxnAcked reads it for every
	// transaction.
	srcOffset atomic.Int64
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
	m.outboxUpdates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_outbox_updates_total", Help: "UPDATEs of outbox rows seen (never sent), by table (schema.table), for tables with on_update: warn.",
	}, []string{"table"})
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
		Buckets: Buckets,
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
	m.reconnects = counter("outboxd_source_reconnects_total",
		"Times the binlog stream was lost and outboxd reconnected to the source (from the acknowledged position).")
	var lockLabel prometheus.Labels
	if o.LockName != "" {
		lockLabel = prometheus.Labels{"lock_name": o.LockName}
	}
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_leader", ConstLabels: lockLabel,
		Help: "1 while this process leads (reads the binlog and sends; always 1 without ha), 0 as a standby or after it fenced itself. With ha, labelled with the lock's name."})
	m.leaderEpoch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_leader_epoch", ConstLabels: lockLabel,
		Help: "The fencing epoch of this process's current or last term as leader (the checkpoint row's epoch it writes with; 0 for the file store)."})
	m.fences = counter("outboxd_fences_total",
		"Times this process, as leader, lost its lock (lease passed without proof, lock connection dropped) and stopped reading, sending and saving.")
	m.missingTxns = counter("outboxd_missing_transactions_total",
		"Transactions outboxd had delivered that no source candidate has any more (an asynchronous failover discarded them), given up under source.on_missing_gtids: continue.")
	m.limitEvents = gauge("outboxd_inflight_events_limit",
		"pipeline.max_inflight_events in effect: outboxd_inflight_events reaching it means reading waits for acknowledgements.")
	m.limitBytes = gauge("outboxd_inflight_bytes_limit",
		"pipeline.max_inflight_bytes in effect: outboxd_inflight_bytes reaching it means reading waits for acknowledgements.")
	m.readToAck = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outboxd_read_to_ack_seconds",
		Help:    "Time from reading a transaction (its first outbox row entering the pipeline) to the broker acknowledging its last; one observation per transaction with outbox rows (for a prepared XA transaction, from reading its XA PREPARE, so the wait for XA COMMIT is included).",
		Buckets: latencyBuckets,
	})
	m.commitToAck = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outboxd_commit_to_ack_seconds",
		Help:    "Time from the source's commit of a transaction to the broker acknowledging its last outbox row; observed only where the commit time has sub-second precision (MySQL 8), never for MariaDB or MySQL 5.7.",
		Buckets: latencyBuckets,
	})
	m.tableDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_table_events_delivered_total",
		Help: "Messages acknowledged by the broker, by outbox table (schema.table) and route label (\"dead_letter\" for dead letters).",
	}, []string{"table", "route"})
	m.tableDead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_table_dead_letters_total",
		Help: "Rows dead-lettered, by outbox table and the route label of the route that took them (\"none\" when none did: no route matched or the row was malformed).",
	}, []string{"table", "route"})
	m.binlogRetention = gauge("outboxd_binlog_retention_seconds",
		"How long the source keeps a binlog file (binlog_expire_logs_seconds, expire_logs_days, or RDS 'binlog retention hours'); 0 when it never purges them or before the first sample (sampled every minute by the leader).")
	m.clockOffset = gauge("outboxd_source_clock_offset_seconds",
		"The source database's clock (NOW()) minus this host's, sampled every minute by the leader; 0 before the first sample. The lag and age gauges compare the source's commit and binlog times with now on the source's clock. Keep it near 0 (NTP on both hosts): time-based settings (reconcile.delay, cleanup.commit_margin) assume the clocks agree.")
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
			Name: "outboxd_binlog_oldest_age_seconds",
			Help: "Now minus the creation time (its first event's timestamp) of the oldest binlog file the source still has; 0 before the first sample (sampled every minute by the leader).",
		}, func() float64 { return m.oldestBinlogAge().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxd_binlog_retention_remaining_seconds",
			Help: "Estimated time left before the source may purge the binlog of the oldest transaction not yet acknowledged: outboxd_binlog_retention_seconds minus outboxd_lag_seconds (negative: it may be gone); 0 when the retention is 0.",
		}, func() float64 { return m.RetentionRemaining().Seconds() }),
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
		m.binlogEvents, m.binlogBytes, m.heartbeats, m.eventsRead, m.outboxUpdates, m.delivered, m.failed,
		m.deadLetters, m.sendDuration, m.retries, m.checkpointSaves, m.checkpointFails, m.checkpointTS,
		m.sourceConnected, m.sinkUp, m.topicMissing, m.txnsBehind, m.txnsSkipped,
		m.reconnects, m.leader, m.leaderEpoch, m.fences, m.missingTxns, m.limitEvents, m.limitBytes, m.readToAck, m.commitToAck, m.tableDelivered, m.tableDead,
		m.binlogRetention, m.clockOffset,
	)
	m.reg.MustRegister(computed...)
	m.rec = newReconcileMetrics()
	m.reg.MustRegister(m.rec.collectors()...)
	m.cleanup = newCleanupMetrics(m.reg)
	m.ktxn = newKafkaTxnMetrics(m.reg)
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

// DeclareTable creates the series of the outbox table (schema.table) at 0: rows read, and
// deliveries and dead letters for each of routes, the route labels that can take its rows
// (RouteDeadLetter included when dead letters are on; RouteNone is added for the dead letters).
// Every label set comes from the config, so the number of series is bounded by it.
func (m *Metrics) DeclareTable(table string, routes []string) {
	if m == nil {
		return
	}
	m.eventsRead.WithLabelValues(table)
	m.outboxUpdates.WithLabelValues(table)
	m.tableDead.WithLabelValues(table, RouteNone)
	for _, r := range routes {
		m.tableDelivered.WithLabelValues(table, r)
		if r != RouteDeadLetter {
			m.tableDead.WithLabelValues(table, r)
		}
	}
}

// InflightLimits records the pipeline's in-flight limits in effect (events and bytes).
func (m *Metrics) InflightLimits(events, bytes int) {
	if m == nil {
		return
	}
	m.limitEvents.Set(float64(events))
	m.limitBytes.Set(float64(bytes))
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

// SetLeader records whether this process leads, and its epoch (0 when unknown).
func (m *Metrics) SetLeader(leading bool, epoch uint64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.standby = !leading
	m.mu.Unlock()
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
	m.leaderEpoch.Set(float64(epoch))
}

// MissingTransactions counts n delivered transactions the database no longer has.
func (m *Metrics) MissingTransactions(n uint64) {
	if m == nil {
		return
	}
	m.missingTxns.Add(float64(n))
}

// Fenced counts one loss of the leader lock.
func (m *Metrics) Fenced() {
	if m == nil {
		return
	}
	m.fences.Inc()
}

// SourceReconnect counts one reconnect to the source after the binlog stream was lost.
func (m *Metrics) SourceReconnect() {
	if m == nil {
		return
	}
	m.reconnects.Inc()
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

// OutboxUpdate counts an UPDATE of an outbox row of table (schema.table) under on_update: warn.
func (m *Metrics) OutboxUpdate(table string) {
	if m == nil {
		return
	}
	m.outboxUpdates.WithLabelValues(table).Inc()
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

// TableDelivered counts n messages of the outbox table (schema.table) on route acknowledged.
func (m *Metrics) TableDelivered(table, route string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.tableDelivered.WithLabelValues(table, route).Add(float64(n))
}

// TableDeadLettered counts one row of the outbox table (schema.table) dead-lettered; route is
// the label of the route that took it, RouteNone when none did.
func (m *Metrics) TableDeadLettered(table, route string) {
	if m == nil {
		return
	}
	m.tableDead.WithLabelValues(table, route).Inc()
}

// TxnAcked observes the latencies of a transaction whose last outbox row the broker
// acknowledged at ackedAt: from readAt, when it entered the pipeline, and from commit, the
// source's commit time, but the latter only when precise says that time has sub-second
// precision (whole seconds would put up to a second of error into every observation).
func (m *Metrics) TxnAcked(readAt, commit time.Time, precise bool, ackedAt time.Time) {
	if m == nil {
		return
	}
	m.readToAck.Observe(max(0, ackedAt.Sub(readAt)).Seconds())
	if precise && !commit.IsZero() {
		m.commitToAck.Observe(max(0, ackedAt.Add(m.sourceOffset()).Sub(commit)).Seconds())
	}
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
	return n, max(0, m.sourceNow().Sub(oldest))
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
	if m.standby {
		// Relaying is the leader's: a standby (or a fenced leader) is behind by nothing, and
		// the stream state of an earlier term must not make its lag grow.
		m.mu.Unlock()
		return LagResult{}
	}
	in := LagInput{
		Now:             m.now(),
		SourceOffset:    m.sourceOffset(),
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
