// Package rocketmq is an in-process RocketMQ NameServer and Broker that speak
// RocketMQ's remoting protocol on loopback ports, good enough for the real
// github.com/apache/rocketmq-client-go/v2 producer to work against unchanged.
//
// It stores sent messages in memory (per topic and queue, with offsets),
// answers route lookups like a NameServer (including fastjson's integer map
// keys in brokerAddrs), and lets a test inject faults into send requests:
// non-OK statuses, error codes, delayed or missing answers, dropped
// connections, and broker outages that keep the stored data.
//
// It is a test double: one broker ("broker-a" in cluster "DefaultCluster"), no persistence
// across Close. Readers by offset (outboxd reconcile) and the client's push consumer in
// clustering mode are served: pulls (suspended while a queue has nothing new), consumer
// groups (heartbeat, consumer list, offsets), send-back to %RETRY%group and %DLQ%group
// (consume.go); orderly consumption's queue locks are not.
package rocketmq

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"
)

// Request and response codes used here (RequestCode / ResponseCode in RocketMQ).
const (
	CodeSuccess           = 0
	CodeSystemError       = 1
	CodeSystemBusy        = 2
	CodeFlushDiskTimeout  = 10
	CodeSlaveNotAvailable = 11
	CodeFlushSlaveTimeout = 12
	CodeMessageIllegal    = 13
	CodeServiceNotAvail   = 14
	CodeNoPermission      = 16
	CodeTopicNotExist     = 17

	ReqSendMessage      = 10
	ReqHeartbeat        = 34
	ReqUnregisterClient = 35
	ReqGetRouteInfo     = 105
	ReqSendMessageV2    = 310
	ReqSendBatchMessage = 320
)

const (
	// BrokerName and ClusterName are what route lookups report.
	BrokerName  = "broker-a"
	ClusterName = "DefaultCluster"
	// defaultTopicKey is the template topic clients fall back to when a topic
	// has no route yet; it exists only when AutoCreateTopics is on, as on a
	// real broker with autoCreateTopicEnable.
	defaultTopicKey       = "TBW102"
	defaultQueues         = 4
	defaultMaxMessageSize = 4 << 20
)

// ACL enables signature checks on the broker, as RocketMQ's plain ACL does.
type ACL struct {
	AccessKey, SecretKey string
}

// Options configures Start. The zero value is usable.
type Options struct {
	// Queues is the queue count of auto-created topics and of Topics (default 4).
	Queues int
	// AutoCreateTopics makes the broker create an unknown topic on its first
	// send; route lookups then fall back to the TBW102 template route, as with
	// a real broker's autoCreateTopicEnable. Off: unknown topics answer 17.
	AutoCreateTopics bool
	// Topics are created at start with Queues queues.
	Topics []string
	// ACL, when set, makes the broker reject requests whose AccessKey or
	// Signature is missing or wrong with SYSTEM_ERROR (1), as RocketMQ 4.x
	// does. The NameServer does not check signatures (neither does 4.x).
	ACL *ACL
	// Log receives one line per notable event (unknown codes, faults,
	// connection errors). Nil discards.
	Log io.Writer
	// BrokerPort and NameServerPort pick fixed loopback ports; 0 picks a free one.
	BrokerPort, NameServerPort int
	// BrokerHost is the host route lookups name the broker by (default 127.0.0.1): a host
	// name such as localhost answers like a broker whose brokerIP1 is a host name (a compose
	// service name), so the client must resolve it. The broker still listens on 127.0.0.1.
	BrokerHost string
	// MaxMessageSize bounds a send's transferred body like the broker's
	// maxMessageSize (default 4 MiB); larger sends answer MESSAGE_ILLEGAL (13).
	MaxMessageSize int
	// RetryDelay is how long a message sent back by a consumer waits in %RETRY%group before
	// it is delivered again (default 1 s; a real broker waits 10 s, 30 s, 1 min, … by
	// reconsume count).
	RetryDelay time.Duration
}

// Message is one stored message.
type Message struct {
	Topic  string
	Queue  int
	Offset int64
	// Body is inflated if the client compressed it.
	Body       []byte
	Keys, Tags string
	// Properties holds every property as sent, including system ones
	// (KEYS, TAGS, UNIQ_KEY, WAIT, ...).
	Properties map[string]string
	// MsgID is the client's unique id (UNIQ_KEY), which is what the client
	// reports as SendResult.MsgID; for batch items, which the Go client sends
	// without UNIQ_KEY, it is the broker's OffsetMsgID.
	MsgID string
	// OffsetMsgID is the broker-side id (store host + commit log offset),
	// reported to the client as SendResult.OffsetMsgID.
	OffsetMsgID string
	Flag        int32
	BornTime    time.Time
	StoredAt    time.Time
	// Request numbers the send request that stored the message (1, 2, … per cluster): the
	// messages of one SEND_BATCH_MESSAGE share it, so a test can see how a producer batched.
	Request int64
	// Batch is whether the request was a SEND_BATCH_MESSAGE.
	Batch bool
	// CommitLogOffset is the message's physical offset, what a consumer names it by when it
	// sends it back.
	CommitLogOffset int64
	// ReconsumeTimes counts the send-backs that led to this copy (0 for a produced message).
	ReconsumeTimes int
}

// Fault changes how the broker answers send requests (codes 10, 310, 320).
// It matches a request for Topic ("" = any) with at least one message that
// satisfies Match (nil = any) and applies to the next Count matching requests
// (0 = until removed). The first matching fault, in injection order, applies.
type Fault struct {
	Topic string
	// Match sees each message of the request (Queue set, Offset not yet). It
	// runs with the cluster's lock held: it must not call Cluster methods.
	Match func(Message) bool
	Count int

	// Code is the response code to answer. 0 answers SUCCESS (useful with
	// Delay); 10/11/12 are FLUSH_DISK_TIMEOUT / SLAVE_NOT_AVAILABLE /
	// FLUSH_SLAVE_TIMEOUT, which the client reports as a non-OK SendResult
	// status with a nil error; any other code (1 SYSTEM_ERROR, 2 SYSTEM_BUSY,
	// 13, 14, 16, 17, ...) is an error response with Remark.
	Code int
	// Remark is the error description; empty picks a broker-like text.
	Remark string
	// Store stores the message(s) before answering, as a real broker has when
	// it answers 10/11/12 or when only the answer gets lost (Drop, NoReply,
	// Delay past the client's timeout). A fault that answers SUCCESS (Code 0
	// without Drop/NoReply) always stores: a SUCCESS answer for an unstored
	// message would model no real broker.
	Store bool
	// Delay answers after this long (past the client's send timeout to model
	// a timeout). Later requests on the same connection are not held up.
	Delay time.Duration
	// Drop closes the connection instead of answering.
	Drop bool
	// NoReply never answers.
	NoReply bool
}

type faultEntry struct {
	id        int
	f         Fault
	remaining int // only meaningful when f.Count > 0
}

type topicState struct {
	queues [][]Message
}

// Cluster is a running NameServer + Broker pair. All methods are safe for
// concurrent use.
type Cluster struct {
	opts Options
	ns   *server
	brk  *server

	logMu sync.Mutex

	mu           sync.Mutex
	brokerPort   int
	brokerUp     bool
	closed       bool
	topics       map[string]*topicState
	faults       []*faultEntry
	nextFaultID  int
	requests     map[int]int
	sendSeq      int64
	commitOffset int64
	// changed is closed and replaced whenever messages are stored, to wake
	// WaitMessages without polling.
	changed chan struct{}
	// groups are the consumer groups (consume.go).
	groups map[string]*groupState
}

// Start starts a NameServer and a Broker on loopback and returns when both
// listen. On error nothing is left running.
func Start(o Options) (*Cluster, error) {
	if o.Queues <= 0 {
		o.Queues = defaultQueues
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = defaultMaxMessageSize
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = time.Second
	}
	c := &Cluster{
		opts:     o,
		topics:   map[string]*topicState{},
		requests: map[int]int{},
		changed:  make(chan struct{}),
		groups:   map[string]*groupState{},
	}

	for _, t := range o.Topics {
		c.CreateTopic(t, o.Queues)
	}
	c.ns = &server{name: "namesrv", logf: c.logf, handle: c.handleNameServer}
	c.brk = &server{name: "broker", logf: c.logf, handle: c.handleBroker, closed: c.connClosed}
	if err := c.ns.listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(o.NameServerPort))); err != nil {
		return nil, fmt.Errorf("start rocketmq test name server: %w", err)
	}
	if err := c.brk.listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BrokerPort))); err != nil {
		c.ns.stop()
		return nil, fmt.Errorf("start rocketmq test broker: %w", err)
	}
	_, port, _ := net.SplitHostPort(c.brk.addr())
	c.brokerPort, _ = strconv.Atoi(port)
	c.brokerUp = true
	c.logf("started: namesrv %s broker %s", c.NameServer(), c.BrokerAddr())
	return c, nil
}

// NameServer returns the NameServer's "127.0.0.1:port". It does not block.
func (c *Cluster) NameServer() string { return c.ns.addr() }

// BrokerAddr returns the broker's "127.0.0.1:port", also while it is stopped.
func (c *Cluster) BrokerAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.brokerPort))
}

// CreateTopic creates topic with queues queues (Options.Queues when <= 0), or
// grows an existing topic to that many queues. Stored messages are kept.
func (c *Cluster) CreateTopic(topic string, queues int) {
	if queues <= 0 {
		queues = c.opts.Queues
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.createTopicLocked(topic, queues)
}

func (c *Cluster) createTopicLocked(topic string, queues int) *topicState {
	ts := c.topics[topic]
	if ts == nil {
		ts = &topicState{}
		c.topics[topic] = ts
	}
	for len(ts.queues) < queues {
		ts.queues = append(ts.queues, nil)
	}
	return ts
}

// Messages returns copies of topic's stored messages ordered by (queue, offset).
func (c *Cluster) Messages(topic string) []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.messagesLocked(topic, -1)
}

// QueueMessages returns copies of one queue's stored messages in offset order.
func (c *Cluster) QueueMessages(topic string, queue int) []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.messagesLocked(topic, queue)
}

func (c *Cluster) messagesLocked(topic string, queue int) []Message {
	ts := c.topics[topic]
	if ts == nil {
		return nil
	}
	var out []Message
	for q, msgs := range ts.queues {
		if queue >= 0 && q != queue {
			continue
		}
		for _, m := range msgs {
			m.Body = append([]byte(nil), m.Body...)
			m.Properties = maps.Clone(m.Properties)
			out = append(out, m)
		}
	}
	return out
}

// Stored returns how many messages topic holds, without copying them. It does not block
// for long (the cluster's lock).
func (c *Cluster) Stored(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if ts := c.topics[topic]; ts != nil {
		for _, q := range ts.queues {
			n += len(q)
		}
	}
	return n
}

// WaitMessages blocks until topic holds at least n messages or ctx ends. On
// ctx's end it returns the messages stored so far and an error wrapping ctx.Err().
func (c *Cluster) WaitMessages(ctx context.Context, topic string, n int) ([]Message, error) {
	for {
		c.mu.Lock()
		msgs := c.messagesLocked(topic, -1)
		ch := c.changed
		c.mu.Unlock()
		if len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-ctx.Done():
			return msgs, fmt.Errorf("wait for %d messages on topic %s (have %d): %w", n, topic, len(msgs), ctx.Err())
		case <-ch:
		}
	}
}

// Inject adds a fault and returns a func that removes it (idempotent).
func (c *Cluster) Inject(f Fault) (remove func()) {
	c.mu.Lock()
	c.nextFaultID++
	id := c.nextFaultID
	c.faults = append(c.faults, &faultEntry{id: id, f: f, remaining: f.Count})
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.removeFaultLocked(id)
	}
}

func (c *Cluster) removeFaultLocked(id int) {
	for i, e := range c.faults {
		if e.id == id {
			c.faults = append(c.faults[:i:i], c.faults[i+1:]...)
			return
		}
	}
}

// Requests returns how many requests of each code both servers have seen.
func (c *Cluster) Requests() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.requests)
}

// StopBroker models a broker outage: it closes the broker's listener and
// connections and returns when they are closed. Stored data and the
// NameServer's route (still naming the broker) are kept.
func (c *Cluster) StopBroker() {
	c.mu.Lock()
	c.brokerUp = false
	c.mu.Unlock()
	c.brk.stop()
	c.logf("broker stopped")
}

// StartBroker listens again on the broker's previous port, keeping stored
// data, and returns once it listens. It returns an error if the port cannot
// be bound or the cluster is closed; it is a no-op when the broker is running.
func (c *Cluster) StartBroker() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("restart rocketmq test broker: cluster closed")
	}
	if c.brokerUp {
		c.mu.Unlock()
		return nil
	}
	port := c.brokerPort
	c.mu.Unlock()
	if err := c.brk.listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		return fmt.Errorf("restart rocketmq test broker: %w", err)
	}
	c.mu.Lock()
	c.brokerUp = true
	c.mu.Unlock()
	c.logf("broker started again on %d", port)
	return nil
}

// Close stops both servers and waits for their goroutines. Idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.brokerUp = false
	c.mu.Unlock()
	c.brk.stop()
	c.ns.stop()
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Log == nil {
		return
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	fmt.Fprintf(c.opts.Log, "%s rocketmq-testenv: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (c *Cluster) count(code int) {
	c.mu.Lock()
	c.requests[code]++
	c.mu.Unlock()
}

func response(code int, remark string) *command {
	return &command{Code: code, Remark: remark, Version: 401, ExtFields: map[string]string{}}
}
