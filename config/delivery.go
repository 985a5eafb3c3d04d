package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// delivery values.
const (
	DeliveryAtLeastOnce = "at_least_once"
	DeliveryExactlyOnce = "exactly_once"
)

// Defaults of the transactions section (delivery: exactly_once).
//
// Why these: a transaction commits as soon as the reader has nothing waiting, so when outboxd
// keeps up each commit follows its rows at once and the sizes never matter; they matter when
// it catches up, where one commit (an EndTxn round trip and a checkpoint record) per 100,000
// events or 64 MiB costs little next to the events, and bounds what a crash makes it resend.
const (
	DefaultTxnMaxEvents = 100_000
	DefaultTxnMaxBytes  = 64 << 20
	DefaultTxnTimeout   = 60 * time.Second
)

// Transactions sizes the Kafka transactions of delivery: exactly_once. The limits are checked
// only at source-transaction boundaries: a source transaction larger than them stays whole in
// one Kafka transaction, sent in many requests; it never fails for its size.
type Transactions struct {
	// MaxEvents is how many events make a Kafka transaction due: it commits at the first
	// source-transaction boundary once it holds this many.
	MaxEvents int `yaml:"max_events"`
	// MaxBytes is how many message bytes make a Kafka transaction due, as MaxEvents.
	MaxBytes int `yaml:"max_bytes"`
	// Timeout is the transaction.timeout.ms given to the transaction coordinator, which aborts
	// a transaction open longer. It must exceed checkpoint.interval and be at most the
	// brokers' transaction.max.timeout.ms (Kafka's default 15m).
	Timeout time.Duration `yaml:"timeout"`
}

func (t *Transactions) applyDefaults() {
	if t.MaxEvents == 0 {
		t.MaxEvents = DefaultTxnMaxEvents
	}
	if t.MaxBytes == 0 {
		t.MaxBytes = DefaultTxnMaxBytes
	}
	setDefaultDur(&t.Timeout, DefaultTxnTimeout)
}

// ExactlyOnce reports whether delivery is exactly_once. Pure.
func (c *Config) ExactlyOnce() bool { return c.Delivery == DeliveryExactlyOnce }

// TransactionalID is the Kafka transactional.id of delivery: exactly_once: "outboxd-" +
// checkpoint.name. Every outboxd with the same name shares it, so a new one fences the old at
// the broker. Pure.
func (c *Config) TransactionalID() string { return "outboxd-" + c.Checkpoint.Name }

// kafkaTopicRe is what Kafka accepts as a topic name (249 characters at most, checked apart).
var kafkaTopicRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// deliveryKnown reports whether delivery is one of its values ("" in a Config built in code).
// Pure.
func (c *Config) deliveryKnown() bool {
	switch c.Delivery {
	case DeliveryAtLeastOnce, DeliveryExactlyOnce, "":
		return true
	}
	return false
}

// validateDelivery checks delivery and the transactions section, and under exactly_once that
// every destination can join the one Kafka transaction.
func (c *Config) validateDelivery(p *problems) {
	if !c.deliveryKnown() {
		p.add("delivery", "%q is not allowed; use at_least_once (default) or exactly_once", c.Delivery)
		return
	}
	t := c.Transactions
	if !c.ExactlyOnce() {
		for _, f := range []struct {
			key string
			set bool
		}{{"max_events", t.MaxEvents != 0}, {"max_bytes", t.MaxBytes != 0}, {"timeout", t.Timeout != 0}} {
			if f.set {
				p.add("transactions."+f.key, "is only for delivery: exactly_once; remove it or set delivery: exactly_once")
			}
		}
		return
	}
	if !c.Checkpoint.Kafka() {
		p.add("delivery", "exactly_once needs checkpoint.store: kafka, so that each checkpoint is written in the Kafka transaction of the events it covers: "+
			"set checkpoint.store: kafka with checkpoint.name, checkpoint.sink and checkpoint.topic (`outboxd checkpoint migrate` moves the current checkpoint there)")
	}
	if t.MaxEvents < 1 {
		p.add("transactions.max_events", "must be positive (default %d); got %d", DefaultTxnMaxEvents, t.MaxEvents)
	}
	if t.MaxBytes < 1 {
		p.add("transactions.max_bytes", "must be positive (default %d); got %d", DefaultTxnMaxBytes, t.MaxBytes)
	}
	switch {
	case t.Timeout < time.Second || t.Timeout > math.MaxInt32*time.Millisecond:
		p.add("transactions.timeout", "must be from 1s to 596h (default %s; at most the brokers' transaction.max.timeout.ms, 15m unless raised); got %s", DefaultTxnTimeout, t.Timeout)
	case c.Checkpoint.Interval > 0 && c.Checkpoint.Interval >= t.Timeout:
		p.add("checkpoint.interval", "must be shorter than transactions.timeout (%s): with delivery: exactly_once it is the longest a Kafka transaction stays open, "+
			"and the coordinator aborts one open longer than the timeout; got %s", t.Timeout, c.Checkpoint.Interval)
	}
	c.validateOneCluster(p)
}

// validateOneCluster checks that every destination of an exactly_once config goes through the
// one transactional producer, which has checkpoint.sink's settings: a route to RocketMQ or to
// another Kafka cluster could not be in its transaction, and settings of another sink that the
// producer does not use would be silently ignored.
func (c *Config) validateOneCluster(p *problems) {
	for _, name := range sortedKeys(c.Sinks) {
		if s := c.Sinks[name]; s.Type == SinkKafka && !s.KafkaIdempotent() {
			p.add("sinks."+name+".idempotent", "must be true with delivery: exactly_once (Kafka transactions need an idempotent producer); remove it, "+
				"or use delivery: at_least_once where the cluster refuses idempotence")
		}
	}
	cpName := c.Checkpoint.Sink
	cp, ok := c.Sinks[cpName]
	if !c.Checkpoint.Kafka() || !ok || cp.Type != SinkKafka {
		// validateCheckpoint reports the checkpoint sink; without it there is no cluster to
		// compare with.
		cp = Sink{}
	}
	users := map[string][]string{} // Kafka sink name -> the fields that send to it
	for i, r := range c.Routes {
		s, ok := c.Sinks[r.Sink]
		if !ok {
			continue // validateRoutes reports it
		}
		field := fmt.Sprintf("routes[%d]", i)
		if s.Type == SinkRocketMQ {
			label := field
			if r.Name != "" {
				label = fmt.Sprintf("route %q", r.Name)
			}
			p.add(field+".sink", "%q is a rocketmq sink: with delivery: exactly_once every route goes into one Kafka transaction, which RocketMQ cannot join; "+
				"send %s to a Kafka sink of checkpoint.sink's cluster, or use delivery: at_least_once", r.Sink, label)
			continue
		}
		users[r.Sink] = append(users[r.Sink], field)
	}
	if dl := c.DeadLetter; dl != nil {
		if s, ok := c.Sinks[dl.Sink]; ok && s.Type == SinkRocketMQ {
			p.add("dead_letter.sink", "%q is a rocketmq sink: with delivery: exactly_once dead letters go into the Kafka transaction too; "+
				"name a Kafka sink of checkpoint.sink's cluster", dl.Sink)
		} else if ok {
			users[dl.Sink] = append(users[dl.Sink], "dead_letter")
		}
	}
	if cp.Type != SinkKafka {
		return
	}
	for _, name := range sortedKeys(users) {
		if name == cpName {
			continue
		}
		if diff := clusterDiff(cp, c.Sinks[name]); len(diff) > 0 {
			used := strings.Join(users[name], " and ")
			p.add("sinks."+name, "is used by %s but differs from checkpoint.sink %q in %s: with delivery: exactly_once every route and the dead-letter sink go "+
				"through one transactional producer with checkpoint.sink's settings; give both sinks the same brokers, tls, sasl and compression, "+
				"or point %s at sink %q", used, cpName, strings.Join(diff, ", "), used, cpName)
		}
	}
}

// clusterDiff names the settings in which Kafka sink b is not the cluster of a as the
// transactional producer reaches it: brokers (as a set), tls, sasl, compression.
func clusterDiff(a, b Sink) []string {
	var out []string
	ba, bb := slices.Clone(a.Brokers), slices.Clone(b.Brokers)
	slices.Sort(ba)
	slices.Sort(bb)
	if !slices.Equal(slices.Compact(ba), slices.Compact(bb)) {
		out = append(out, "brokers")
	}
	if tlsKey(a.TLS) != tlsKey(b.TLS) {
		out = append(out, "tls")
	}
	if saslKey(a.SASL) != saslKey(b.SASL) {
		out = append(out, "sasl")
	}
	if a.Compression != b.Compression {
		out = append(out, "compression")
	}
	return out
}

// tlsKey is what of a SinkTLS decides the connection (the files are read from the same paths).
func tlsKey(t *SinkTLS) any {
	if t == nil {
		return nil
	}
	type settings struct {
		ca, serverName     string
		insecure           bool
		cert, keyFile, key string
	}
	return settings{t.CAFile, t.ServerName, t.InsecureSkipVerify, t.CertFile, t.KeyFile, t.Key}
}

// saslKey is what of a SASL decides the login, after password_file was read into Password.
func saslKey(a *SASL) any {
	if a == nil {
		return nil
	}
	return SASL{Mechanism: a.Mechanism, Username: a.Username, Password: a.Password, TokenFile: a.TokenFile, Region: a.Region}
}
