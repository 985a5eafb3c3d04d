package rocketmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/sink"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultGroup       = "outboxd-producer"
	DefaultSendTimeout = 3 * time.Second
	// DefaultMaxMessageBytes is the broker's (and the Java client's) maxMessageSize default. The
	// Go client checks no size at all.
	DefaultMaxMessageBytes = 4 << 20
	// maxLanes caps the queues one Send has a message in flight to, and is the lane count used
	// for a topic whose queue count the sink has not learned yet.
	maxLanes = 16
	// maxTopicLen and the name pattern are the Java client's TopicValidator rules; the Go client
	// checks none of them and the broker would answer an opaque error.
	maxTopicLen = 127
	// DefaultMaxBatchMessages and DefaultMaxBatchBytes bound one batch request (a
	// SEND_BATCH_MESSAGE): its message count, and the bytes the broker stores for it. A
	// broker refuses a batch over its maxMessageSize (4 MiB by default): 4.8 and older count
	// every message's stored record (body, properties, topic and about 100 bytes of header);
	// 4.9 and 5.x count the raw bodies and encode the records into maxMessageSize + 64 KiB.
	// A quarter of the default keeps clear of all of them, and of a broker configured
	// smaller, while a request still carries hundreds of 1 KiB events.
	DefaultMaxBatchMessages = 256
	DefaultMaxBatchBytes    = 1 << 20
	// closeWait bounds how long Close waits for abandoned SendSync calls to notice their
	// cancelled ctx (a route lookup inside the client ignores ctx).
	closeWait = 2 * time.Second
)

// Config configures a Sink. NameServers is required; every other zero field takes its default.
type Config struct {
	// NameServers are the NameServers' "host:port" addresses. Host names (a Kubernetes
	// service name) are resolved by the sink with DNS at start and again whenever the client
	// refreshes its NameServer list (every 2 minutes); the Go client itself takes IP
	// addresses only.
	NameServers []string
	// Group is the producer group (default DefaultGroup).
	Group string
	// Namespace, when set, prefixes every topic as "<namespace>%<topic>".
	Namespace string
	// AccessKey and SecretKey enable ACL signing; both or neither.
	AccessKey, SecretKey string
	// SendTimeout bounds each Send, all its requests and the lookup of a new topic's queue
	// count together (default DefaultSendTimeout): nothing of a Send is written later.
	SendTimeout time.Duration
	// MaxMessageBytes is the largest body sent (default DefaultMaxMessageBytes, the broker's
	// maxMessageSize default); a larger one fails permanently without being sent. A batch
	// request stays below it too, since the broker applies maxMessageSize to a batch's whole
	// (uncompressed) body.
	MaxMessageBytes int
	// maxBatchMessages and maxBatchBytes override DefaultMaxBatchMessages and
	// DefaultMaxBatchBytes (tests); the byte bound never exceeds MaxMessageBytes.
	maxBatchMessages, maxBatchBytes int
	// Name is the sink's name; New's name argument wins when set.
	Name string
	// lookup replaces the DNS lookup of NameServer host names (tests); nil means
	// net.DefaultResolver.LookupHost.
	lookup lookupFunc
	// Logger receives debug logs (one line per acknowledged message with msg_id, queue and
	// offset) and warnings about dropped headers, with sink=<name> added; the zero Logger discards.
	Logger zerolog.Logger
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.NameServers) == 0 {
		errs = append(errs, errors.New("nameservers: at least one host:port is required"))
	}
	for i, a := range c.NameServers {
		host, port, err := net.SplitHostPort(a)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("nameservers[%d] %q: want host:port: %w", i, a, err))
		case host == "":
			errs = append(errs, fmt.Errorf("nameservers[%d] %q: no host", i, a))
		case port == "":
			errs = append(errs, fmt.Errorf("nameservers[%d] %q: no port", i, a))
		}
	}
	if c.Group != "" && !validName(c.Group, 255) {
		errs = append(errs, fmt.Errorf("group %q: use at most 255 of the characters a-z A-Z 0-9 _ - %% |", c.Group))
	}
	if c.Namespace != "" && !validName(c.Namespace, maxTopicLen) {
		errs = append(errs, fmt.Errorf("namespace %q: use at most %d of the characters a-z A-Z 0-9 _ - %% |", c.Namespace, maxTopicLen))
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("access_key and secret_key: set both or neither"))
	}
	if c.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("send_timeout %v: must not be negative", c.SendTimeout))
	}
	if c.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("max_message_bytes %d: must not be negative", c.MaxMessageBytes))
	}
	return errors.Join(errs...)
}

// validName applies the Java client's pattern ^[%|a-zA-Z0-9_-]+$ and a length limit.
func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == '_', r == '-', r == '%', r == '|':
		default:
			return false
		}
	}
	return true
}

// checkTopic rejects what a broker would never accept, with a message that says what to
// change.
func checkTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("message has no topic: %w", errInvalidMessage)
	case !validName(topic, maxTopicLen):
		return fmt.Errorf("topic %q: RocketMQ allows at most %d of the characters a-z A-Z 0-9 _ - %% |; fix the route's topic template: %w",
			topic, maxTopicLen, errInvalidMessage)
	case topic == "TBW102", topic == "SCHEDULE_TOPIC_XXXX", strings.HasPrefix(topic, "RMQ_SYS_"),
		strings.HasPrefix(topic, "rmq_sys_"), strings.HasPrefix(topic, "%RETRY%"), strings.HasPrefix(topic, "%DLQ%"):
		return fmt.Errorf("topic %q is a RocketMQ system topic: %w", topic, errInvalidMessage)
	}
	return nil
}

// Sink is a sink.Sink and sink.Checker for one RocketMQ cluster. Safe for concurrent use.
type Sink struct {
	name     string
	cfg      Config
	instance string
	log      zerolog.Logger
	resolver *nsResolver
	// conn is the producer and the route client once the NameServers resolved; nil before.
	conn atomic.Pointer[clients]
	// startMu serialises starting conn; startErr and startAt are the last failed start.
	startMu  sync.Mutex
	startErr error
	startAt  time.Time
	newConn  func() (*clients, error)

	// hints carries each in-flight request's queue hash to the queue selector, which the
	// client calls with nothing but the (batch) message: keyed by the *primitive.MessageQueue
	// the sink puts on the request's first message, which the client's batch wrapper copies.
	hints sync.Map // *primitive.MessageQueue → *hint
	// rr rotates messages without a key over the queues.
	rr atomic.Uint32
	// droppedHeaders counts headers not sent because of their name; warned holds the names
	// already logged.
	droppedHeaders atomic.Int64
	warned         sync.Map // string → struct{}

	mu sync.Mutex
	// queues is each (namespaced) topic's writable queue count, as last seen by the selector:
	// it sizes the lanes, and a topic in it once had a route.
	queues map[string]int
	// lookupFailed is when learnQueues last failed to look up a (namespaced) topic's queues.
	lookupFailed map[string]time.Time
	closed       bool
	cancels      map[uint64]context.CancelFunc // in-flight SendSync calls, cancelled by Close
	nextID       uint64
	wg           sync.WaitGroup
}

var (
	_ sink.Sink    = (*Sink)(nil)
	_ sink.Checker = (*Sink)(nil)
)

// New validates cfg, resolves the NameServer host names, creates and starts the producer, and
// returns a Sink named name (the "sink" log field, and part of the producer's instance name).
// It does not contact the cluster: the first Send or Check does (the client starts background
// route and heartbeat loops at once). It blocks for the DNS lookups (at most lookupTimeout per
// name). When no name resolves, it still returns the Sink, without a producer: Send and Check
// then fail retryably, naming the host, and try to start it again (see connect). On error
// nothing is left running.
func New(name string, cfg Config) (*Sink, error) {
	if name == "" {
		name = cfg.Name
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rocketmq sink %q: %w", name, err)
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.maxBatchMessages <= 0 {
		cfg.maxBatchMessages = DefaultMaxBatchMessages
	}
	if cfg.maxBatchBytes <= 0 {
		cfg.maxBatchBytes = DefaultMaxBatchBytes
	}
	cfg.maxBatchBytes = min(cfg.maxBatchBytes, cfg.MaxMessageBytes)
	cfg.Name = name
	s := &Sink{
		name:         name,
		cfg:          cfg,
		log:          cfg.Logger.With().Str("sink", name).Logger(),
		queues:       make(map[string]int),
		lookupFailed: make(map[string]time.Time),
		cancels:      make(map[uint64]context.CancelFunc),
	}
	// The client keeps one client object (connections, route tables, producer groups) per
	// "ip@instance name" in a process-wide map and refuses a second producer with the same
	// instance name but other NameServers: every Sink gets a name of its own.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	s.instance = fmt.Sprintf("outboxd-%s-%d-%s", instanceSafe(name), os.Getpid(), hex.EncodeToString(rnd[:]))

	s.resolver = newNsResolver(cfg.NameServers, cfg.lookup)
	opts := []producer.Option{
		producer.WithNsResolver(s.resolver),
		producer.WithGroupName(cfg.Group),
		producer.WithInstanceName(s.instance),
		// The client's retry may pick another queue or broker (reordering a key); outboxd's
		// pipeline resends failed messages itself, in key order.
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(cfg.SendTimeout),
		producer.WithQueueSelector(selector{s}),
	}
	adminOpts := []admin.AdminOption{admin.WithResolver(s.resolver)}
	if cfg.Namespace != "" {
		opts = append(opts, producer.WithNamespace(cfg.Namespace))
		adminOpts = append(adminOpts, admin.WithNamespace(cfg.Namespace))
	}
	if cfg.AccessKey != "" {
		cred := primitive.Credentials{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey}
		opts = append(opts, producer.WithCredentials(cred))
		adminOpts = append(adminOpts, admin.WithCredentials(cred))
	}
	s.newConn = func() (*clients, error) {
		p, err := rmq.NewProducer(opts...)
		if err != nil {
			return nil, fmt.Errorf("rocketmq sink %q: create producer: %w", name, err)
		}
		if err := p.Start(); err != nil {
			_ = p.Shutdown()
			return nil, fmt.Errorf("rocketmq sink %q: start producer (group %s, instance %s): %w", name, cfg.Group, s.instance, err)
		}
		a, err := admin.NewAdmin(adminOpts...)
		if err != nil {
			_ = p.Shutdown()
			return nil, fmt.Errorf("rocketmq sink %q: create route client: %w", name, err)
		}
		return &clients{producer: p, admin: a}, nil
	}
	if _, err := s.connect(context.Background()); err != nil {
		if !errors.Is(err, ErrNameServerUnresolved) {
			return nil, err
		}
		// Like a NameServer that is down: sends fail (retryably) and try again, /readyz
		// and `check` say why.
		s.log.Warn().Err(err).Msg("no NameServer host name resolves yet; sends wait and retry until one does")
	}
	return s, nil
}

// clients is what the sink talks to the cluster with.
type clients struct {
	producer rmq.Producer
	// admin looks up routes at the NameServer without the producer's caches (Check, and
	// confirming a missing topic).
	admin admin.Admin
}

// connect returns the producer and route client, starting them first if no NameServer had
// resolved so far. A failed start is retried at most once a second; until then the last
// error is returned at once. It blocks for the DNS lookups (lookupTimeout per name) or until
// ctx ends; safe for concurrent use.
func (s *Sink) connect(ctx context.Context) (*clients, error) {
	if c := s.conn.Load(); c != nil {
		return c, nil
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if c := s.conn.Load(); c != nil {
		return c, nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if s.startErr != nil && time.Since(s.startAt) < time.Second {
		return nil, s.startErr
	}
	addrs, rerr := s.resolver.resolve(ctx)
	if len(addrs) == 0 {
		s.startErr, s.startAt = fmt.Errorf("rocketmq sink %q: %w", s.name, rerr), time.Now()
		return nil, s.startErr
	}
	if rerr != nil {
		s.log.Warn().Err(rerr).Strs("resolved", addrs).Msg("some NameServer host names do not resolve; using the others")
	}
	c, err := s.resolver.pin(addrs, s.newConn)
	if err != nil {
		s.startErr, s.startAt = err, time.Now()
		return nil, err
	}
	s.startErr = nil
	s.conn.Store(c)
	return c, nil
}

// instanceSafe keeps the characters a client id can carry ('@' separates its parts).
func instanceSafe(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// InstanceName is the producer's instance name, unique per Sink in the process. It does not
// block.
func (s *Sink) InstanceName() string { return s.instance }

// DroppedHeaders is how many headers were not sent because their name is a RocketMQ system
// property, is not valid text, or repeats an earlier header of the same message. It does not
// block and is safe for concurrent use.
func (s *Sink) DroppedHeaders() int64 { return s.droppedHeaders.Load() }

// Close shuts the producer down. Send calls still running fail with a retryable error; Close
// cancels their requests and waits (at most a few seconds) for them to return before it
// stops the client. Safe to call more than once.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, cancel := range s.cancels {
		cancel()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(closeWait)
	select {
	case <-done:
	case <-t.C:
		s.log.Warn().Msg("closing the producer while a send request is still running")
	}
	t.Stop()
	s.startMu.Lock() // no start after this: clients sees closed
	c := s.conn.Load()
	s.startMu.Unlock()
	if c == nil {
		return nil
	}
	err := c.producer.Shutdown()
	if aerr := c.admin.Close(); err == nil {
		err = aerr
	}
	if err != nil {
		return fmt.Errorf("rocketmq sink %q: close: %w", s.name, err)
	}
	return nil
}

// namespaced is topic as the client sends it (and as the selector sees it).
func (s *Sink) namespaced(topic string) string {
	if s.cfg.Namespace == "" {
		return topic
	}
	return s.cfg.Namespace + "%" + topic
}

// selector is the producer's queue selector: the queue is hint modulo the topic's writable
// queues, hint being FNV-1a of the key (what the client's own hash selector computes for a
// text sharding key) or a rotating number for a message without a key. It finds the hint by
// msg.Queue, which the sink sets on a request's first message and the client copies onto a
// batch message, so a key's queue is the same whether it is sent alone or in a batch.
type selector struct{ s *Sink }

func (sel selector) Select(msg *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	if len(mqs) == 0 {
		return nil
	}
	sel.s.mu.Lock()
	sel.s.queues[msg.Topic] = len(mqs)
	sel.s.mu.Unlock()
	var h uint32
	if v, ok := sel.s.hints.Load(msg.Queue); msg.Queue != nil && ok {
		hn := v.(*hint)
		if hn.n != 0 && hn.n != len(mqs) {
			// The batch was grouped for another queue count: its keys no longer share one
			// queue. No queue makes the client fail the request unsent; the sink resends.
			hn.refused.Store(int32(len(mqs)))
			return nil
		}
		h = hn.hash
	} else if k := msg.GetShardingKey(); k != "" {
		h = keyHash([]byte(k)) // not reached: every request the sink sends has a hint
	}
	return mqs[int(h%uint32(len(mqs)))]
}

func keyHash(key []byte) uint32 {
	f := fnv.New32a()
	_, _ = f.Write(key)
	return f.Sum32()
}

// checkMissing asks the NameServer whether topic exists after a send failed for want of a
// route (err). It returns err marked with errTopicMissing only when the NameServer answered
// TOPIC_NOT_EXIST and this sink never saw a route for the topic: a topic that had one is
// more likely a NameServer that restarted and has not heard from its brokers yet. Otherwise
// (NameServer unreachable, topic found) err stays retryable.
func (s *Sink) checkMissing(ctx context.Context, topic string, err error) error {
	s.mu.Lock()
	_, seen := s.queues[s.namespaced(topic)]
	s.mu.Unlock()
	if seen {
		return fmt.Errorf("%w (the topic had a route before: retrying)", err)
	}
	_, lerr := s.lookup(ctx, topic)
	switch {
	case errors.Is(lerr, rmqerrors.ErrTopicNotExist):
		return fmt.Errorf("%w: the NameServers have no route for topic %s; create it (mqadmin updateTopic) or fix the route's topic: %w",
			err, s.namespaced(topic), errTopicMissing)
	case lerr != nil:
		return fmt.Errorf("%w (route lookup: %v)", err, lerr)
	default:
		return fmt.Errorf("%w (the NameServers now have a route for topic %s)", err, s.namespaced(topic))
	}
}

// lookup asks the NameServers for topic's route and returns its clusters, bypassing every
// route cache. It returns rmqerrors.ErrTopicNotExist when a NameServer says the topic does
// not exist. The client's lookup ignores ctx; ctx only ends the wait.
func (s *Sink) lookup(ctx context.Context, topic string) ([]string, error) {
	type result struct {
		clusters []string
		err      error
	}
	ch := make(chan result, 1)
	go func() {
		// FetchClusterList, unlike FetchPublishMessageQueues, applies no namespace itself.
		conn, err := s.connect(ctx)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		c, err := conn.admin.FetchClusterList(s.namespaced(topic))
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.clusters, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Check verifies that the NameServer host names resolve, that a NameServer answers and that
// every topic has a route with at least one broker. With topics (outboxd check) a host name
// that does not resolve is reported even when another NameServer answers; without (the
// readiness probe) only when none resolves, since the sink works with the others. It blocks
// until the NameServers answered or ctx ended; safe for concurrent use. The error names every
// host name and topic that failed.
func (s *Sink) Check(ctx context.Context, topics []string) error {
	addrs, rerr := s.resolver.resolve(ctx)
	if rerr != nil && len(addrs) == 0 {
		return fmt.Errorf("rocketmq sink %q: %w", s.name, rerr)
	}
	if len(topics) == 0 {
		rerr = nil
	}
	if err := s.check(ctx, topics); err != nil || rerr != nil {
		return fmt.Errorf("rocketmq sink %q: %w", s.name, errors.Join(rerr, err))
	}
	return nil
}

// check is Check for the routes and topics; its error does not name the sink.
func (s *Sink) check(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		// Any answer, even TOPIC_NOT_EXIST, shows a NameServer is reachable.
		if _, err := s.lookup(ctx, "TBW102"); err != nil && !errors.Is(err, rmqerrors.ErrTopicNotExist) {
			return fmt.Errorf("NameServers %v: %w", s.cfg.NameServers, err)
		}
		return nil
	}
	var errs []error
	for _, t := range topics {
		if err := checkTopic(t); err != nil {
			errs = append(errs, err)
			continue
		}
		clusters, err := s.lookup(ctx, t)
		switch {
		case errors.Is(err, rmqerrors.ErrTopicNotExist):
			errs = append(errs, fmt.Errorf("topic %s: no route on the NameServers; create it (mqadmin updateTopic): %w", s.namespaced(t), err))
		case err != nil:
			errs = append(errs, fmt.Errorf("topic %s: NameServers %v: %w", s.namespaced(t), s.cfg.NameServers, err))
		case len(clusters) == 0:
			errs = append(errs, fmt.Errorf("topic %s: route has no broker", s.namespaced(t)))
		}
	}
	return errors.Join(errs...)
}
