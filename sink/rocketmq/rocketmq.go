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
	// SendTimeout bounds each message's send request (default DefaultSendTimeout).
	SendTimeout time.Duration
	// MaxMessageBytes is the largest body sent (default DefaultMaxMessageBytes, the broker's
	// maxMessageSize default); a larger one fails permanently without being sent.
	MaxMessageBytes int
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

	// hints carries each in-flight *primitive.Message's queue hash to the queue selector,
	// which the client calls with nothing but the message.
	hints sync.Map // *primitive.Message → uint32
	// rr rotates messages without a key over the queues.
	rr atomic.Uint32
	// droppedHeaders counts headers not sent because of their name; warned holds the names
	// already logged.
	droppedHeaders atomic.Int64
	warned         sync.Map // string → struct{}

	mu sync.Mutex
	// queues is each (namespaced) topic's writable queue count, as last seen by the selector:
	// it sizes the lanes, and a topic in it once had a route.
	queues  map[string]int
	closed  bool
	cancels map[uint64]context.CancelFunc // in-flight SendSync calls, cancelled by Close
	nextID  uint64
	wg      sync.WaitGroup
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
	cfg.Name = name
	s := &Sink{
		name:    name,
		cfg:     cfg,
		log:     cfg.Logger.With().Str("sink", name).Logger(),
		queues:  make(map[string]int),
		cancels: make(map[uint64]context.CancelFunc),
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
// text sharding key) or a rotating number for a message without a key.
type selector struct{ s *Sink }

func (sel selector) Select(msg *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	if len(mqs) == 0 {
		return nil
	}
	sel.s.mu.Lock()
	sel.s.queues[msg.Topic] = len(mqs)
	sel.s.mu.Unlock()
	var h uint32
	if v, ok := sel.s.hints.Load(msg); ok {
		h = v.(uint32)
	} else if k := msg.GetShardingKey(); k != "" {
		h = keyHash([]byte(k)) // not reached: every message the sink sends has a hint
	}
	return mqs[int(h%uint32(len(mqs)))]
}

func keyHash(key []byte) uint32 {
	f := fnv.New32a()
	_, _ = f.Write(key)
	return f.Sum32()
}

// outMsg is one message of a Send, encoded before any I/O.
type outMsg struct {
	m    *sink.Message
	pm   *primitive.Message
	hash uint32
}

// build encodes m, or says why it can never be sent.
func (s *Sink) build(i int, m *sink.Message) (*primitive.Message, error) {
	if m == nil {
		return nil, fmt.Errorf("message %d is nil: %w", i, errInvalidMessage)
	}
	if err := checkTopic(m.Topic); err != nil {
		return nil, err
	}
	if err := checkTopic(s.namespaced(m.Topic)); err != nil {
		return nil, fmt.Errorf("with namespace %q: %w", s.cfg.Namespace, err)
	}
	if len(m.Value) == 0 {
		return nil, fmt.Errorf("topic %s: message %d (event %s) has an empty body, which RocketMQ rejects: %w", m.Topic, i, m.EventID, errInvalidMessage)
	}
	if len(m.Value) > s.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("topic %s: message %d (event %s) body is %d bytes, over max_message_bytes %d; raise it (and the broker's maxMessageSize) or shrink the event: %w",
			m.Topic, i, m.EventID, len(m.Value), s.cfg.MaxMessageBytes, errTooLarge)
	}
	props := make(map[string]string, len(m.Headers)+3)
	for _, h := range m.Headers {
		var why string
		switch {
		case !validPropertyName(h.Key):
			why = "is not text a RocketMQ property name can carry"
		case isSystemProperty(h.Key):
			why = "is a RocketMQ system property"
		default:
			if _, dup := props[h.Key]; dup {
				why = "repeats an earlier header (RocketMQ properties are a map)"
			}
		}
		if why != "" {
			s.dropHeader(h.Key, why)
			continue
		}
		props[h.Key] = encodeValue(h.Value)
	}
	// Set after the headers, which can therefore never replace them.
	if m.Key != nil {
		props[primitive.PropertyShardingKey] = encodeValue(m.Key)
	}
	if m.EventID != "" {
		props[primitive.PropertyKeys] = encodeValue([]byte(m.EventID))
	}
	if m.Tag != "" {
		props[primitive.PropertyTags] = encodeValue([]byte(m.Tag))
	}
	if n := propertiesSize(props); n > maxPropertiesBytes {
		return nil, fmt.Errorf("topic %s: message %d (event %s) headers, key and tag encode to %d bytes of properties, over RocketMQ's limit of %d; shrink the headers: %w",
			m.Topic, i, m.EventID, n, maxPropertiesBytes, errTooLarge)
	}
	pm := primitive.NewMessage(m.Topic, m.Value)
	pm.WithProperties(props)
	return pm, nil
}

func (s *Sink) dropHeader(name, why string) {
	s.droppedHeaders.Add(1)
	if _, seen := s.warned.LoadOrStore(name, struct{}{}); !seen {
		s.log.Warn().Str("header", name).Msgf("header not sent: its name %s (logged once per name)", why)
	}
}

// lane is the messages of one Send bound for one queue of one topic, in slice order.
type lane struct {
	topic string
	idx   []int
}

// Send sends each message with SendSync and blocks until every one was answered, failed, or
// ctx ended. It returns nil only when the broker answered SEND_OK for every message;
// otherwise a *sink.SendError whose failures carry classify's verdict. Messages with the same
// key go to the same queue in slice order, one in flight per queue; a failed message fails
// every later one with the same key (across topics too), without sending it where that is
// still possible. A cancelled ctx returns at once, every unanswered message failed (a request
// already on the wire may still be stored: a resend can duplicate it). Safe for concurrent
// use; callers keep one key in at most one Send at a time.
func (s *Sink) Send(ctx context.Context, msgs []*sink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return sink.AllFailed(len(msgs), fmt.Errorf("rocketmq sink %q: %w", s.name, errClosed))
	}
	if err := ctx.Err(); err != nil {
		return sink.AllFailed(len(msgs), fmt.Errorf("rocketmq sink %q: %w", s.name, err))
	}
	errs := make([]error, len(msgs))
	out := make([]outMsg, len(msgs))
	for i, m := range msgs {
		pm, err := s.build(i, m)
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		h := s.rr.Add(1)
		if m.Key != nil {
			h = keyHash(m.Key)
		}
		out[i] = outMsg{m: m, pm: pm, hash: h}
	}
	sink.CascadeByKey(msgs, errs, errNotSent)

	lanes := s.assign(out, errs)
	run := &sendRun{s: s, msgs: msgs, out: out, errs: errs, topicErr: map[string]error{}}
	sink.FanOut(ctx, len(lanes), maxLanes,
		func(k int) { run.lane(ctx, lanes[k]) },
		func(k int) {
			l := lanes[k]
			for _, i := range l.idx {
				errs[i] = fmt.Errorf("rocketmq sink %q: topic %s: %w", s.name, l.topic, ctx.Err())
			}
		})
	sink.CascadeByKey(msgs, errs, errNotSent)

	return sink.Collect(errs, nil)
}

// assign groups the sendable messages into lanes: per topic, hash modulo the topic's queue
// count as last seen by the selector (so a lane is a queue), or modulo maxLanes before the
// sink has seen the topic's route. Either way one key is in one lane, which is what keeps its
// order; the queue itself is chosen by the selector from the same hash.
func (s *Sink) assign(out []outMsg, errs []error) []*lane {
	type laneKey struct {
		topic string
		n     uint32
	}
	s.mu.Lock()
	counts := make(map[string]uint32)
	for i, o := range out {
		if errs[i] == nil {
			if _, ok := counts[o.m.Topic]; !ok {
				n := uint32(s.queues[s.namespaced(o.m.Topic)])
				if n == 0 {
					n = maxLanes
				}
				counts[o.m.Topic] = n
			}
		}
	}
	s.mu.Unlock()
	byKey := make(map[laneKey]*lane)
	var order []*lane
	for i, o := range out {
		if errs[i] != nil {
			continue
		}
		k := laneKey{o.m.Topic, o.hash % counts[o.m.Topic]}
		l := byKey[k]
		if l == nil {
			l = &lane{topic: o.m.Topic}
			byKey[k] = l
			order = append(order, l)
		}
		l.idx = append(l.idx, i)
	}
	return order
}

// sendRun is the state of one Send shared by its lanes. Each errs index is written by one
// lane only.
type sendRun struct {
	s    *Sink
	msgs []*sink.Message
	out  []outMsg
	errs []error

	mu sync.Mutex
	// topicErr is a route-level failure for a topic (no route, confirmed missing or not):
	// the topic's remaining messages fail with it instead of each asking the NameServer.
	topicErr map[string]error
}

// lane sends l's messages one at a time, each after the previous one was answered.
func (r *sendRun) lane(ctx context.Context, l *lane) {
	s := r.s
	failedKey := make(map[string]int) // key → index of its first failure in this lane
	for _, i := range l.idx {
		o := r.out[i]
		// A topic-wide verdict comes first: for a missing topic every message is permanent,
		// including the ones that follow a failed key.
		if terr := r.topicFailure(l.topic); terr != nil {
			r.errs[i] = fmt.Errorf("message %d not sent: %w", i, terr)
			continue
		}
		if o.m.Key != nil {
			if j, failed := failedKey[string(o.m.Key)]; failed {
				r.errs[i] = fmt.Errorf("topic %s: message %d follows failed message %d with the same key: %w", l.topic, i, j, errNotSent)
				continue
			}
		}
		err := ctx.Err()
		if err != nil {
			err = fmt.Errorf("rocketmq sink %q: topic %s: %w", s.name, l.topic, err)
		}
		if err == nil {
			err = r.sendOne(ctx, i)
		}
		if err != nil {
			r.errs[i] = err
			if o.m.Key != nil {
				failedKey[string(o.m.Key)] = i
			}
		}
	}
}

func (r *sendRun) topicFailure(topic string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topicErr[topic]
}

// sendOne sends message i and returns nil only on SEND_OK; otherwise the classified error.
func (r *sendRun) sendOne(ctx context.Context, i int) error {
	s := r.s
	o := r.out[i]
	res, err := s.sendSync(ctx, o.pm, o.hash)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// The client reports a cancelled request as its own "request timeout".
			return fmt.Errorf("rocketmq sink %q: topic %s: message %d: %w (client: %v)", s.name, o.m.Topic, i, cerr, err)
		}
		if errors.Is(err, errClosed) || errors.Is(err, rmqerrors.ErrNotRunning) {
			return fmt.Errorf("rocketmq sink %q: %w", s.name, errClosed)
		}
		err = fmt.Errorf("rocketmq sink %q: send to topic %s (message %d, event %s): %w", s.name, o.m.Topic, i, o.m.EventID, err)
		if needsRouteCheck(err) {
			// Held across the lookup so that the topic's other lanes wait for one verdict
			// instead of each asking the NameServer.
			r.mu.Lock()
			defer r.mu.Unlock()
			if prev := r.topicErr[o.m.Topic]; prev != nil {
				return fmt.Errorf("message %d: %w", i, prev)
			}
			err = classify(s.checkMissing(ctx, o.m.Topic, err))
			r.topicErr[o.m.Topic] = err
			return err
		}
		return classify(err)
	}
	queue := -1
	if res.MessageQueue != nil {
		queue = res.MessageQueue.QueueId
	}
	s.log.Debug().Str("topic", o.m.Topic).Str("event_id", o.m.EventID).Str("msg_id", res.MsgID).
		Str("offset_msg_id", res.OffsetMsgID).Int("queue", queue).Int64("offset", res.QueueOffset).
		Str("status", statusName(res.Status)).Msg("send answered")
	if res.Status != primitive.SendOK {
		return classify(fmt.Errorf("rocketmq sink %q: topic %s queue %d: message %d (event %s, msg_id %s) answered %s: %w",
			s.name, o.m.Topic, queue, i, o.m.EventID, res.MsgID, statusName(res.Status), errNotOK))
	}
	return nil
}

func statusName(st primitive.SendStatus) string {
	switch st {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	default:
		return fmt.Sprintf("status %d", st)
	}
}

// sendSync runs the client's SendSync in a goroutine so that ctx ends the wait at once: the
// client's route lookup ignores ctx (up to 6 s per NameServer). The goroutine, if abandoned,
// ends at the latest when its own cancelled request or the route lookup returns; Close
// cancels and waits for it.
func (s *Sink) sendSync(ctx context.Context, pm *primitive.Message, hash uint32) (*primitive.SendResult, error) {
	sendCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	id := s.nextID
	s.nextID++
	s.cancels[id] = cancel
	s.wg.Add(1)
	s.mu.Unlock()

	type result struct {
		res *primitive.SendResult
		err error
	}
	ch := make(chan result, 1)
	s.hints.Store(pm, hash)
	go func() {
		defer s.wg.Done()
		var res *primitive.SendResult
		c, err := s.connect(sendCtx)
		if err == nil {
			res, err = c.producer.SendSync(sendCtx, pm)
		}
		s.hints.Delete(pm)
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		ch <- result{res, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-sendCtx.Done():
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, errClosed
	}
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
