// Package kafkatxn is outboxd's exactly-once path on Kafka: one transactional producer through
// which every route's records and the checkpoint record that covers them are written in one
// Kafka transaction, and the checkpoint store that reads that record back (read_committed).
//
// Why franz-go's kgo here, while the at-least-once sink (sink/kafka) stays on kafka-go: Kafka
// transactions have many edge states (coordinator moves, CONCURRENT_TRANSACTIONS, KIP-360/588
// epoch bumps, aborts after a failed record, read_committed fetches with aborted-transaction
// lists) that kgo implements and tests against real Kafka, and kafka-go has none of them.
// Writing them again on kafka-go's protocol package would be a second, untested transaction
// client; kgo is already in go.mod for kfake and the bench.
//
// Fencing is the broker's: Open makes the coordinator issue InitProducerID for the
// transactional id at once, which aborts a previous holder's open transaction and refuses its
// later produce and EndTxn requests. Those refusals come back here as errors wrapping
// sink.ErrFenced.
package kafkatxn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
)

// Defaults applied to zero Options fields.
const (
	DefaultTimeout            = 10 * time.Second
	DefaultMaxMessageBytes    = 1 << 20
	DefaultTransactionTimeout = 60 * time.Second
)

// Options configure a Session. Brokers, TransactionalID, Topic and Key are required.
type Options struct {
	Name               string        // checkpoint.sink, for errors and metrics
	Brokers            []string      // bootstrap addresses, host:port
	TLS                *tls.Config   // nil: plaintext
	SASL               *kafka.SASL   // nil: none. PLAIN, SCRAM-SHA-256/512, OAUTHBEARER (token file re-read per connection), AWS_MSK_IAM
	Compression        string        // none|gzip|snappy|lz4|zstd ("" = none)
	Timeout            time.Duration // per request (default 10s)
	MaxMessageBytes    int           // default 1 MiB; a larger record fails permanently before it is produced
	TransactionalID    string        // "outboxd-" + checkpoint.name
	TransactionTimeout time.Duration // transaction.timeout.ms given to the coordinator (default 60s)
	Topic, Key         string        // the checkpoint topic and the record key (checkpoint.name)
	Logger             zerolog.Logger
	OnFenced           func()               // called once per refusal by the broker for fencing (metrics)
	OnTxn              func(committed bool) // called per EndTxn (metrics)
}

// Session is one transactional producer and the Kafka checkpoint store of one outboxd. Send,
// Save, Abort and Load are safe for concurrent use; Save and Abort wait for the Sends in flight.
type Session struct {
	o    Options
	cl   *kgo.Client     // transactional; InitProducerID only through fence (Open) or a produce
	auth *adaptMechanism // nil without SASL

	// txnMu is held shared by each Send for its whole duration and exclusively by Save and
	// Abort: a transaction ends only when no Send is adding records to it.
	txnMu sync.RWMutex

	mu sync.Mutex // guards the fields below
	// opened is set by Open: only a fenced session may produce (Check's must never fence).
	opened bool
	// epoch is the producer epoch the coordinator gave Open: every InitProducerID for the
	// transactional id bumps it, so it orders the holders as the mysql row's epoch does.
	epoch int16
	// inTxn: a transaction was begun and not ended.
	inTxn bool
	// doomed is the first record failure of the open transaction: it can only abort now.
	doomed error
	// fenced is the refusal that fenced this session; everything fails with it from then on.
	fenced error
	// unknown is the checkpoint JSON of a commit whose outcome is unknown (a timeout), resolved
	// by the next Save.
	unknown []byte
	closed  bool
	// mark is the newest reconcile mark SaveMark was given, markSaved the newest one a commit
	// carried: the next Save writes mark in its transaction when it is newer.
	mark, markSaved time.Time
}

// New builds a Session without any request to the brokers, for Check and Load: it never
// fences a running outboxd. Send and Save need Open. It does not block.
func New(o Options) (*Session, error) {
	if len(o.Brokers) == 0 {
		return nil, errors.New("kafka transactions: no brokers")
	}
	if o.TransactionalID == "" || o.Topic == "" || o.Key == "" {
		return nil, errors.New("kafka transactions: the transactional id, the checkpoint topic and its key are required")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.TransactionTimeout <= 0 {
		o.TransactionTimeout = DefaultTransactionTimeout
	}
	opts, auth, err := clientOpts(o)
	if err != nil {
		return nil, err
	}
	codec, err := codec(o.Compression)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %q: %w", o.Name, err)
	}
	opts = append(opts,
		kgo.TransactionalID(o.TransactionalID),
		kgo.TransactionTimeout(o.TransactionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Transient errors are retried by kgo without a record deadline: a record that fails
		// dooms the whole transaction, so giving up on a transient error would only turn it
		// into an abort. Permanent errors (too large, invalid, forbidden) still fail at once.
		kgo.RecordRetries(math.MaxInt64),
		kgo.RecordDeliveryTimeout(0),
		kgo.ProduceRequestTimeout(o.Timeout),
		kgo.ProducerBatchMaxBytes(int32(min(o.MaxMessageBytes, math.MaxInt32))),
		kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}),
		// No linger (kgo's default is 10 ms): a Send blocks until its records are acknowledged,
		// and the pipeline's lanes already hand over what queued meanwhile, so lingering only
		// delays each acknowledgement. It also delays the drain before every commit: with the
		// default, the 1-row exactly-once catch-up ran at about 7k events/s, one produce round
		// of 10 ms after another with outboxd's CPU 17% busy (bench/README.md, issue 24).
		// MaxBufferedRecords (kgo's 50,000) and MaxProduceRequestsInflightPerBroker (5 with
		// idempotence, which transactions require) stay as they are: the pipeline keeps at
		// most pipeline.max_inflight_events (20,000 by default) unacknowledged.
		kgo.ProducerLinger(0),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %q: %w", o.Name, err)
	}
	return &Session{o: o, cl: cl, auth: auth}, nil
}

// Open connects and fences: the coordinator issues InitProducerID for TransactionalID before
// Open returns, which aborts a previous holder's open transaction and makes the broker refuse
// that holder's later sends. It blocks, retrying transient errors until ctx ends. On error
// nothing is left open.
func Open(ctx context.Context, o Options) (*Session, error) {
	s, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := s.fence(ctx); err != nil {
		s.cl.Close()
		return nil, err
	}
	return s, nil
}

// fence loads the producer id (InitProducerID) now rather than at the first produce, as kgo
// would: a takeover must fence the old holder before the new one reads the checkpoint.
func (s *Session) fence(ctx context.Context) error {
	for {
		// kgo retries a failed InitProducerID until ctx ends, whatever the cause; a request
		// of its own first makes refused credentials an error at once.
		err := s.cl.Ping(ctx)
		var epoch int16
		if err == nil {
			_, epoch, err = s.cl.ProducerID(ctx)
		}
		if err == nil {
			s.mu.Lock()
			s.opened, s.epoch = true, epoch
			s.mu.Unlock()
			return nil
		}
		if f := s.fencedError(err); f != nil {
			return f
		}
		var ke *kerr.Error
		if ce := connError(err, s.o.SASL, s.auth); ce != err || ctx.Err() != nil || (errors.As(err, &ke) && !ke.Retriable) {
			return fmt.Errorf("kafka sink %q: brokers %s: transactional id %s: %w", s.o.Name, strings.Join(s.o.Brokers, ","), s.o.TransactionalID, ce)
		}
		s.o.Logger.Debug().Err(err).Str("sink", s.o.Name).Msg("InitProducerID refused for now; retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka sink %q: brokers %s: transactional id %s: %w", s.o.Name, strings.Join(s.o.Brokers, ","), s.o.TransactionalID, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ProducerEpoch is the producer epoch Open was given (0 for a session from New). It does not
// block.
func (s *Session) ProducerEpoch() int16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// isFenced reports whether err is the broker's refusal of this producer for fencing.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// fencedError returns nil unless err is the broker's refusal of this producer for fencing; then
// it records the refusal (OnFenced), and returns an error wrapping sink.ErrFenced that says what
// happened. It does not block.
func (s *Session) fencedError(err error) error {
	var msg string
	switch {
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		msg = fmt.Sprintf("kafka sink %q: transactional id %s was taken by another producer (another outboxd leads now)", s.o.Name, s.o.TransactionalID)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		msg = fmt.Sprintf("kafka sink %q: the broker refuses transactional id %s: grant this principal WRITE and DESCRIBE on TransactionalId %s (kafka-acls --add --operation Write --operation Describe --transactional-id %s)",
			s.o.Name, s.o.TransactionalID, s.o.TransactionalID, s.o.TransactionalID)
	default:
		return nil
	}
	f := fmt.Errorf("%s: %w: %w", msg, sink.ErrFenced, err)
	s.mu.Lock()
	if s.fenced == nil {
		s.fenced = f
	}
	s.mu.Unlock()
	if s.o.OnFenced != nil {
		s.o.OnFenced()
	}
	return f
}

// readyLocked reports why the session cannot produce, or nil. The caller holds s.mu.
func (s *Session) readyLocked() error {
	switch {
	case s.closed:
		return fmt.Errorf("kafka sink %q: session closed", s.o.Name)
	case s.fenced != nil:
		return s.fenced
	case !s.opened:
		return fmt.Errorf("kafka sink %q: session not opened (Open fences; New is for check and load only)", s.o.Name)
	}
	return nil
}

// Close releases the clients. An open transaction is left to the broker: the next holder's
// InitProducerID, or the transaction timeout, aborts it. It does not block on the network.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cl.Close()
	return nil
}

// codec maps sinks.<name>.compression onto kgo's codec.
func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("compression %q: use none, gzip, snappy, lz4 or zstd", name)
}

// clientOpts are the connection options every client of the session shares: brokers, TLS,
// SASL, dial timeout. It does no I/O but AWS_MSK_IAM's reading of the AWS configuration files.
func clientOpts(o Options) ([]kgo.Opt, *adaptMechanism, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ClientID("outboxd"),
		kgo.DialTimeout(o.Timeout),
		kgo.WithLogger(kgoLogger{o.Logger}),
	}
	if o.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(o.TLS.Clone()))
	}
	if o.SASL == nil {
		return opts, nil, nil
	}
	m, err := kafka.Mechanism(*o.SASL)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka sink %q: %w", o.Name, err)
	}
	a := newAdapter(m)
	return append(opts, kgo.SASL(a)), &a, nil
}

// kgoLogger passes kgo's warnings and errors to zerolog at debug level: kgo logs retries it
// handles itself, and what outboxd must act on comes back as an error. kgo never logs
// credentials.
type kgoLogger struct{ l zerolog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	ev := k.l.Debug().Str("kgo_level", strings.ToLower(level.String()))
	for i := 0; i+1 < len(keyvals); i += 2 {
		ev = ev.Interface(fmt.Sprint(keyvals[i]), keyvals[i+1])
	}
	ev.Msg(msg)
}
