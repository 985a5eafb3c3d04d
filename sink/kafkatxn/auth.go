package kafkatxn

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	kgsasl "github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/outboxd/outboxd/sink/kafka"
)

// adaptMechanism runs one of sink/kafka's SASL mechanisms (kafka-go's interface) on a kgo
// connection, so both Kafka paths authenticate with the same code: PLAIN, SCRAM, OAUTHBEARER
// re-reading its token file per connection, and AWS_MSK_IAM signing per connection with
// credentials from the standard AWS chain and sasl.region. The two interfaces have the same
// shape (a first message, then challenge and answer until done); kafka-go passes the broker's
// host in the context, which AWS_MSK_IAM signs. Safe for concurrent use as the mechanism is.
type adaptMechanism struct {
	m kgsasl.Mechanism
	// started and finished count handshakes: a broker that rejects credentials may just close
	// the connection (kfake does), which kgo reports as a bare EOF; started > finished then
	// tells that the handshake is what failed. Reset on each success.
	started, finished *atomic.Int64
}

func newAdapter(m kgsasl.Mechanism) adaptMechanism {
	return adaptMechanism{m: m, started: new(atomic.Int64), finished: new(atomic.Int64)}
}

// Mechanism runs m, one of sink/kafka's SASL mechanisms, on a kgo client (kgo.SASL): the
// other kgo clients of outboxd (reconcile's read_committed reader) authenticate with the same
// code as the sessions. It does not block.
func Mechanism(m kgsasl.Mechanism) sasl.Mechanism { return newAdapter(m) }

// failing reports whether the most recent handshake did not finish.
func (a adaptMechanism) failing() bool { return a.started.Load() > a.finished.Load() }

func (a adaptMechanism) Name() string { return a.m.Name() }

func (a adaptMechanism) Authenticate(ctx context.Context, hostport string) (sasl.Session, []byte, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	port, _ := strconv.Atoi(portStr)
	ctx = kgsasl.WithMetadata(ctx, &kgsasl.Metadata{Host: host, Port: port})
	a.started.Add(1)
	sm, first, err := a.m.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &adaptSession{ctx: ctx, sm: sm, a: a}, first, nil
}

// adaptSession keeps the context Authenticate was given, which kgo documents as valid for the
// whole session (kgo's Session interface has no context of its own).
type adaptSession struct {
	ctx context.Context //nolint:containedctx // the session's lifetime is the handshake's
	sm  kgsasl.StateMachine
	a   adaptMechanism
}

func (s *adaptSession) Challenge(challenge []byte) (bool, []byte, error) {
	done, resp, err := s.sm.Next(s.ctx, challenge)
	if done && err == nil {
		s.a.finished.Add(1)
		s.a.started.Store(s.a.finished.Load())
	}
	return done, resp, err
}

// connError says what to change when err comes from authentication: a TLS client certificate
// the broker requires, or SASL credentials it rejected (while the latest handshake is
// unfinished). Other errors come back unchanged. No secret is part of the message.
func connError(err error, sasl *kafka.SASL, a *adaptMechanism) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "tls: certificate required") {
		return fmt.Errorf("the broker requires a client certificate (set tls.cert_file and tls.key_file to a certificate the broker's CA signed): %w", err)
	}
	if sasl != nil && a != nil && a.failing() {
		return fmt.Errorf("SASL %s %s: %w", sasl.Mechanism, sasl.Rejected(), err)
	}
	return err
}
