// Package kafka is the Kafka sink: it produces with acks=all through kafka-go's protocol-level
// Transport and turns each partition's broker acknowledgement into a nil error.
//
// It deliberately avoids kafka-go's Writer (see TRAPS.md): the Writer defaults to no acks and a
// 1 s linger, and after MaxAttempts it drops a batch and writes the next one for the partition,
// so a resend by outboxd would arrive out of order. Here each Send picks partitions itself
// (Java-compatible murmur2 on the key), sends produce requests per leader broker carrying a
// record batch per partition (shared by the Sends running at once, see combiner), and reports
// exactly which messages were not acknowledged. It resends on its own only as an idempotent
// producer (idempotent.go): a batch whose outcome is unknown, as the same bytes under the same
// sequence, which the broker stores at most once, within Timeout.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	kafkago "github.com/segmentio/kafka-go"
	meta "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/outboxd/outboxd/sink"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultMaxMessageBytes = 1 << 20 // the broker's message.max.bytes default, rounded down
	// metadataTTL bounds how stale the transport's cached partition counts and leaders get when
	// no error forces a refresh earlier. kafka-go randomises each interval below this bound.
	metadataTTL = 5 * time.Second
	// maxInFlight caps the partition requests one Send has outstanding at once.
	maxInFlight = 32
)

// Config configures a Sink. Brokers is required; every other zero field takes its default.
type Config struct {
	// Brokers are bootstrap addresses, host:port.
	Brokers []string
	// ClientID is sent to the brokers (client.id); defaults to "outboxd".
	ClientID string
	// Timeout bounds each produce and metadata request (default 10s). Half of it is given to
	// the broker as the acks=all wait, leaving the rest for the network.
	Timeout time.Duration
	// MaxMessageBytes is the largest encoded, uncompressed record batch sent; a single message
	// whose batch is larger fails permanently without being sent. It must not exceed the
	// broker's message.max.bytes (default 1 MiB, the broker's default).
	MaxMessageBytes int
	// AllowAutoTopicCreation asks the broker to create unknown topics (needs
	// auto.create.topics.enable on the broker). Default false: an unknown topic is a permanent
	// failure.
	AllowAutoTopicCreation bool
	// Compression of record batches; zero is none.
	Compression kafkago.Compression
	// Logger receives debug logs about metadata refreshes, with sink=<name> added (do not add
	// it yourself: a key given twice is a duplicate JSON key); the zero Logger discards.
	Logger zerolog.Logger
	// TLS, when set, encrypts every broker connection with it.
	TLS *tls.Config
	// SASL, when set, authenticates every broker connection.
	SASL *SASL
	// Idempotent makes the sink an idempotent producer (KIP-98, idempotent.go): a batch whose
	// answer was lost is resent under the same producer id and sequence, and the broker keeps
	// one copy. It needs the IDEMPOTENT_WRITE permission on clusters with ACLs before Kafka 2.8.
	Idempotent bool
}

// SASL is the mechanism and credentials for broker authentication.
type SASL struct {
	// Mechanism is "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER" or "AWS_MSK_IAM".
	Mechanism string
	// Username and Password are for PLAIN and SCRAM.
	Username string
	Password string
	// TokenFile is the OAUTHBEARER token's file, read again for every new connection.
	TokenFile string
	// Region is AWS_MSK_IAM's AWS region; empty takes the standard AWS configuration's.
	Region string
}

// validate checks that a names a known mechanism with what it needs. It does no I/O.
func (a *SASL) validate() error {
	switch a.Mechanism {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if a.Username == "" || a.Password == "" {
			return fmt.Errorf("sasl %s: username and password are required", a.Mechanism)
		}
	case mechOAuthBearer:
		if a.TokenFile == "" {
			return errors.New("sasl OAUTHBEARER: token_file is required")
		}
	case mechAWSMSKIAM:
	default:
		return fmt.Errorf("sasl mechanism %q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM", a.Mechanism)
	}
	return nil
}

// mechanism builds the kafka-go mechanism. AWS_MSK_IAM reads the standard AWS configuration
// (environment and shared files, no network) to find the region and credential chain.
func (a *SASL) mechanism() (sasl.Mechanism, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	switch a.Mechanism {
	case "PLAIN":
		return plain.Mechanism{Username: a.Username, Password: a.Password}, nil
	case mechOAuthBearer:
		return &oauthBearer{tokenFile: a.TokenFile}, nil
	case mechAWSMSKIAM:
		return newMSKIAM(context.Background(), a.Region)
	}
	return newSCRAM(a.Mechanism, a.Username, a.Password)
}

// rejected describes a rejection of a's credentials and what to check, never with a secret.
func (a *SASL) rejected() string {
	switch a.Mechanism {
	case mechOAuthBearer:
		return fmt.Sprintf("was rejected by the broker (check that sasl.token_file %s holds a current token the broker accepts)", a.TokenFile)
	case mechAWSMSKIAM:
		return "was rejected by the broker (check the AWS credentials of the standard chain and that their IAM policy allows kafka-cluster:Connect on the cluster)"
	}
	return fmt.Sprintf("as user %q was rejected by the broker (check sasl.username, sasl.password and the mechanism the broker enables)", a.Username)
}

// Sink is a sink.Sink and sink.Checker for one Kafka cluster. Safe for concurrent use.
type Sink struct {
	name      string
	cfg       Config
	addr      net.Addr
	transport *kafkago.Transport
	client    *kafkago.Client
	// auth is the SASL mechanism in use, nil without SASL.
	auth *authTracker
	log  zerolog.Logger

	// rr picks the partition for messages without a key.
	rr     atomic.Uint64
	closed atomic.Bool

	mu          sync.Mutex
	refreshedAt time.Time // when the transport's metadata cache was last discarded

	combine combiner // merges concurrent Sends' record batches into few requests (produce.go)

	// The producer id partitions start with when Idempotent (idempotent.go).
	pidMu    sync.Mutex
	pidSet   bool
	pid      int64
	pidEpoch int16
	topics   topicCache
}

var (
	_ sink.Sink    = (*Sink)(nil)
	_ sink.Checker = (*Sink)(nil)
)

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one host:port is required"))
	}
	for i, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("brokers[%d] %q: want host:port: %w", i, b, err))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must not be negative", c.Timeout))
	}
	if c.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("max_message_bytes %d: must not be negative", c.MaxMessageBytes))
	} else if c.MaxMessageBytes > 0 && c.MaxMessageBytes < 1024 {
		errs = append(errs, fmt.Errorf("max_message_bytes %d: must be at least 1024", c.MaxMessageBytes))
	}
	if c.SASL != nil {
		if err := c.SASL.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	switch c.Compression {
	case 0, kafkago.Gzip, kafkago.Snappy, kafkago.Lz4, kafkago.Zstd:
	default:
		errs = append(errs, fmt.Errorf("compression %d: unknown codec", c.Compression))
	}
	return errors.Join(errs...)
}

// New validates cfg and returns a Sink named name (the "sink" log field). It does not contact
// the brokers: the first Send or Check does. On error nothing was allocated that needs Close.
func New(name string, cfg Config) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka sink %q: %w", name, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "outboxd"
	}
	addr := kafkago.TCP(cfg.Brokers...)
	tr := &kafkago.Transport{
		ClientID:    cfg.ClientID,
		DialTimeout: cfg.Timeout,
		MetadataTTL: metadataTTL,
		TLS:         cfg.TLS,
	}
	var auth *authTracker
	if cfg.SASL != nil {
		mech, err := cfg.SASL.mechanism()
		if err != nil {
			return nil, fmt.Errorf("kafka sink %q: %w", name, err)
		}
		auth = &authTracker{mech: mech, rejected: cfg.SASL.rejected()}
		tr.SASL = auth
	}
	s := &Sink{
		auth:      auth,
		name:      name,
		cfg:       cfg,
		addr:      addr,
		transport: tr,
		// Client.Timeout bounds every request and, halved, is the broker's acks=all wait; with
		// it unset kafka-go would ask the broker for a 500 ms wait regardless of ctx.
		client: &kafkago.Client{Addr: addr, Timeout: cfg.Timeout, Transport: tr},
		log:    cfg.Logger.With().Str("sink", name).Logger(),
	}
	s.combine.s, s.combine.pause, s.combine.now = s, time.Sleep, time.Now
	return s, nil
}

// Close releases the connections. It does not wait for Sends in flight, which fail or finish on
// their own; later Sends fail with a transient error. Safe to call more than once.
func (s *Sink) Close() error {
	s.closed.Store(true)
	s.transport.CloseIdleConnections()
	return nil
}

// partBatch is the messages of one Send bound for one partition, in slice order.
type partBatch struct {
	topic     string
	partition int
	leader    int // the partition leader's broker id in the cached metadata, -1 if none
	idx       []int
}

// Send produces msgs with acks=all and blocks until every partition answered, the per-request
// Timeout passed, or ctx ended. It returns nil only when the broker acknowledged every message;
// otherwise a *sink.SendError whose failures carry classify's verdict. Messages with the same
// key go to the same partition in slice order; a failed message fails every later one with the
// same key (across topics too) without sending it where that is still possible, and always
// within a topic: a key's message for another partition than its previous one waits for that
// one's acknowledgement. Safe for
// concurrent use; callers keep one key in at most one Send at a time.
func (s *Sink) Send(ctx context.Context, msgs []*sink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return sink.AllFailed(len(msgs), fmt.Errorf("kafka sink %q: %w", s.name, errClosed))
	}
	if err := ctx.Err(); err != nil {
		return sink.AllFailed(len(msgs), fmt.Errorf("kafka sink %q: %w", s.name, err))
	}
	start := time.Now()
	errs := make([]error, len(msgs))

	topicSet := make(map[string]struct{})
	for i, m := range msgs {
		switch {
		case m == nil:
			errs[i] = classify(fmt.Errorf("message %d is nil: %w", i, errInvalidMessage))
		case m.Topic == "":
			errs[i] = classify(fmt.Errorf("message %d has no topic: %w", i, errInvalidMessage))
		case singleBatchSize(m) > s.cfg.MaxMessageBytes:
			errs[i] = classify(fmt.Errorf("topic %s: message %d encodes to %d bytes, over %d; raise max_message_bytes (and the broker's message.max.bytes) or shrink the event: %w",
				m.Topic, i, singleBatchSize(m), s.cfg.MaxMessageBytes, errTooLarge))
		default:
			topicSet[m.Topic] = struct{}{}
		}
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	infos := s.resolve(ctx, start, topics)
	s.recheckPartitions(ctx, start, msgs, errs, infos)
	for i, m := range msgs {
		if errs[i] == nil {
			if ti := infos[m.Topic]; ti.err != nil {
				errs[i] = ti.err
			} else if m.HasPartition && !slices.Contains(ti.partitions, int(m.Partition)) {
				// Before the cascade, so that later messages with its key are held back too.
				errs[i] = classify(fmt.Errorf("topic %s: message %d (event %s) asks for partition %d, but the topic has %d partitions (tables[].columns.partition): %w",
					m.Topic, i, m.EventID, m.Partition, len(ti.partitions), errBadPartition))
			}
		}
	}
	sink.CascadeByKey(msgs, errs, errNotSent)

	// A key whose rows go to several partitions of a topic (columns.partition) is sent in
	// waves: a row goes out only after its key's earlier row in another partition was
	// acknowledged, so a failure really holds back the later rows (not sent, resent once, in
	// order) instead of leaving them stored and reported failed. One wave otherwise.
	waves, n := partitionWaves(msgs, errs, infos)
	for w := 0; w < n; w++ {
		werrs := errs
		if n > 1 {
			werrs = slices.Clone(errs)
			for i := range werrs {
				if werrs[i] == nil && waves[i] != w {
					werrs[i] = errNotSent // not this wave's: assign skips it
				}
			}
		}
		s.sendWave(ctx, start, msgs, werrs, infos)
		if n > 1 {
			for i := range errs {
				if waves[i] == w && errs[i] == nil {
					errs[i] = werrs[i]
				}
			}
			sink.CascadeByKey(msgs, errs, errNotSent)
		}
	}
	sink.CascadeByKey(msgs, errs, errNotSent)
	if s.closed.Load() {
		// A Send racing Close may have opened a fresh connection pool; drop it.
		s.transport.CloseIdleConnections()
	}

	return sink.Collect(errs, s.authError)
}

// sendWave sends the messages of msgs whose errs entry is nil and writes their failures into
// errs. It blocks until every partition answered or ctx ended.
func (s *Sink) sendWave(ctx context.Context, start time.Time, msgs []*sink.Message, errs []error, infos map[string]topicInfo) {
	groups := byLeader(s.assign(msgs, errs, infos))
	// One produce request per leader carries every partition of the Send that it leads (see
	// sendLeader); the combiner caps the requests in flight per broker (maxRequestsPerBroker),
	// and the limit here caps how many leader groups of one Send run at once.
	sink.FanOut(ctx, len(groups), maxInFlight,
		func(k int) { s.sendLeader(ctx, start, msgs, groups[k], errs) },
		func(k int) {
			for _, b := range groups[k] {
				for _, i := range b.idx {
					errs[i] = fmt.Errorf("topic %s partition %d: %w", b.topic, b.partition, ctx.Err())
				}
			}
		})
}

// assign picks each pending message's partition and groups them per partition in slice order.
// Keyed messages use Java's default partitioner (murmur2, positive, mod the partition count) so
// placement matches other producers of the same keys; messages without a key of one topic go to
// one partition per Send, rotating across Sends.
func (s *Sink) assign(msgs []*sink.Message, errs []error, infos map[string]topicInfo) []*partBatch {
	byTP := make(map[topicPartition]*partBatch)
	var order []*partBatch
	sticky := make(map[string]int)
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		parts := infos[m.Topic].partitions
		var p int
		if m.HasPartition {
			p = int(m.Partition) // one the topic has: Send checked
		} else if m.Key == nil {
			var ok bool
			if p, ok = sticky[m.Topic]; !ok {
				p = parts[int(s.rr.Add(1)%uint64(len(parts)))]
				sticky[m.Topic] = p
			}
		} else {
			p = keyPartition(m, parts)
		}
		k := topicPartition{m.Topic, p}
		b := byTP[k]
		if b == nil {
			leader, ok := infos[m.Topic].leaders[p]
			if !ok {
				leader = -1
			}
			b = &partBatch{topic: m.Topic, partition: p, leader: leader}
			byTP[k] = b
			order = append(order, b)
		}
		b.idx = append(b.idx, i)
	}
	return order
}

// topicInfo is a topic's sorted partition ids and their leaders' broker ids, or why messages
// for it cannot be sent.
type topicInfo struct {
	partitions []int
	leaders    map[int]int
	err        error // classified
}

// resolve returns every topic's partitions from the transport's metadata cache. A topic missing
// from the cache is looked up again in metadata fetched after start (and created if allowed);
// only when it is missing there too does it fail permanently.
func (s *Sink) resolve(ctx context.Context, start time.Time, topics []string) map[string]topicInfo {
	if len(topics) == 0 {
		return map[string]topicInfo{}
	}
	now := time.Now()
	if cached, ok := s.topics.get(topics, now); ok {
		return cached
	}
	infos := make(map[string]topicInfo, len(topics))
	failAll := func(ts []string, err error) {
		for _, t := range ts {
			infos[t] = topicInfo{err: classify(fmt.Errorf("metadata for topic %s: %w", t, err))}
		}
	}
	defer func() { s.topics.put(infos, now) }()
	md, err := s.metadata(ctx, topics)
	if err != nil {
		if staleMetadata(err) && ctx.Err() == nil {
			s.refresh(start, err)
		}
		failAll(topics, err)
		return infos
	}
	var missing []string
	for _, t := range topics {
		mt, ok := md[t]
		switch {
		case !ok || errors.Is(mt.Error, kafkago.UnknownTopicOrPartition):
			missing = append(missing, t)
		default:
			infos[t] = s.topicInfo(start, mt)
		}
	}
	if len(missing) == 0 {
		return infos
	}

	s.refresh(start, fmt.Errorf("topics %s not in cached metadata", strings.Join(missing, ",")))
	created := map[string]error{}
	if s.cfg.AllowAutoTopicCreation {
		if created, err = s.autoCreate(ctx, missing); err != nil {
			failAll(missing, err)
			return infos
		}
	}
	md, err = s.metadata(ctx, missing)
	if err != nil {
		failAll(missing, err)
		return infos
	}
	for _, t := range missing {
		mt, ok := md[t]
		if ok && !errors.Is(mt.Error, kafkago.UnknownTopicOrPartition) {
			infos[t] = s.topicInfo(start, mt)
			continue
		}
		cerr, asked := created[t]
		switch {
		case asked && (cerr == nil || errors.Is(cerr, kafkago.LeaderNotAvailable)):
			// The broker created it; its partitions have no leader yet.
			infos[t] = topicInfo{err: classify(fmt.Errorf("topic %s is being created: %w", t, kafkago.LeaderNotAvailable))}
		case asked && !errors.Is(cerr, kafkago.UnknownTopicOrPartition):
			infos[t] = topicInfo{err: classify(fmt.Errorf("creating topic %s: %w", t, cerr))}
		case asked:
			infos[t] = topicInfo{err: classify(fmt.Errorf("topic %s (broker refused to auto-create it; create the topic or set auto.create.topics.enable): %w", t, errTopicMissing))}
		default:
			infos[t] = topicInfo{err: classify(fmt.Errorf("topic %s (create it, or allow auto topic creation): %w", t, errTopicMissing))}
		}
	}
	return infos
}

func (s *Sink) topicInfo(start time.Time, mt kafkago.Topic) topicInfo {
	if mt.Error != nil {
		if staleMetadata(mt.Error) {
			s.refresh(start, mt.Error)
		}
		return topicInfo{err: classify(fmt.Errorf("metadata for topic %s: %w", mt.Name, mt.Error))}
	}
	if len(mt.Partitions) == 0 {
		s.refresh(start, errors.New("topic without partitions"))
		return topicInfo{err: classify(fmt.Errorf("metadata for topic %s: no partitions: %w", mt.Name, kafkago.LeaderNotAvailable))}
	}
	ids := make([]int, len(mt.Partitions))
	leaders := make(map[int]int, len(mt.Partitions))
	for i, p := range mt.Partitions {
		ids[i] = p.ID
		leaders[p.ID] = -1
		if p.Leader.Host != "" { // kafka-go gives a partition without a leader the zero Broker
			leaders[p.ID] = p.Leader.ID
		}
	}
	sort.Ints(ids)
	return topicInfo{partitions: ids, leaders: leaders}
}

// metadata returns the named topics from the transport's cache (fetching it first if the cache
// is new). It blocks for at most Timeout.
func (s *Sink) metadata(ctx context.Context, topics []string) (map[string]kafkago.Topic, error) {
	res, err := s.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, err
	}
	out := make(map[string]kafkago.Topic, len(res.Topics))
	for _, t := range res.Topics {
		out[t.Name] = t
	}
	return out, nil
}

// autoCreate asks the broker for metadata of topics with auto-creation allowed, which creates
// them when the broker permits it. It returns each topic's error code from the broker (nil when
// the topic exists now). kafka-go's transport then waits for the created topics to show up in
// its cache, bounded by Timeout.
func (s *Sink) autoCreate(ctx context.Context, topics []string) (map[string]error, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	r, err := s.transport.RoundTrip(ctx, s.addr, &meta.Request{TopicNames: topics, AllowAutoTopicCreation: true})
	if err != nil {
		return nil, fmt.Errorf("auto-creating topics: %w", err)
	}
	res, ok := r.(*meta.Response)
	if !ok {
		return nil, fmt.Errorf("auto-creating topics: unexpected response %T", r)
	}
	out := make(map[string]error, len(res.Topics))
	for _, t := range res.Topics {
		if t.ErrorCode != 0 {
			out[t.Name] = kafkago.Error(t.ErrorCode)
		} else {
			out[t.Name] = nil
		}
	}
	return out, nil
}

// refresh makes the next request use metadata fetched after since: unless the cache was already
// discarded after since, it drops kafka-go's connection pool, whose replacement fetches fresh
// metadata before serving anything. Requests in flight keep the old pool until they finish.
// This is the only way kafka-go's Transport offers to force a refresh; the mutex and since make
// concurrent callers that saw the same failure share one. It does not block on the network.
func (s *Sink) refresh(since time.Time, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refreshedAt.After(since) {
		return
	}
	s.refreshedAt = time.Now()
	s.log.Debug().Str("reason", why.Error()).Msg("refreshing kafka metadata")
	s.topics.clear()
	s.transport.CloseIdleConnections()
}

// Check blocks until fresh metadata arrived (or Timeout or ctx ended) and reports, in one error,
// an unreachable cluster or every named topic that is missing (unless auto-creation is allowed)
// or not writable.
func (s *Sink) Check(ctx context.Context, topics []string) error {
	if s.closed.Load() {
		return fmt.Errorf("kafka sink %q: %w", s.name, errClosed)
	}
	s.refresh(time.Now(), errors.New("check"))
	ts := topics
	if ts == nil {
		ts = []string{}
	}
	md, err := s.metadata(ctx, ts)
	if err != nil {
		return fmt.Errorf("kafka sink %q: brokers %s unreachable: %w", s.name, strings.Join(s.cfg.Brokers, ","), s.authError(err))
	}
	var errs []error
	for _, t := range topics {
		mt, ok := md[t]
		switch {
		case !ok || errors.Is(mt.Error, kafkago.UnknownTopicOrPartition):
			if !s.cfg.AllowAutoTopicCreation {
				errs = append(errs, fmt.Errorf("topic %s does not exist: create it or allow auto topic creation", t))
			}
		case mt.Error != nil:
			errs = append(errs, fmt.Errorf("topic %s: %w", t, mt.Error))
		case len(mt.Partitions) == 0:
			errs = append(errs, fmt.Errorf("topic %s has no partitions", t))
		}
	}
	if s.cfg.Idempotent {
		// A cluster that refuses the producer id (no IDEMPOTENT_WRITE) refuses every batch.
		if _, _, err := s.producerID(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka sink %q: %w", s.name, errors.Join(errs...))
	}
	return nil
}
