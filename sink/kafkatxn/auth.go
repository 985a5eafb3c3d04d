package kafkatxn

import (
	"context"
	"net"
	"strconv"

	kgsasl "github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/sasl"
)

// adaptMechanism runs one of sink/kafka's SASL mechanisms (kafka-go's interface) on a kgo
// connection, so both Kafka paths authenticate with the same code: PLAIN, SCRAM, OAUTHBEARER
// re-reading its token file per connection, and AWS_MSK_IAM signing per connection with
// credentials from the standard AWS chain and sasl.region. The two interfaces have the same
// shape (a first message, then challenge and answer until done); kafka-go passes the broker's
// host in the context, which AWS_MSK_IAM signs. Safe for concurrent use as the mechanism is.
type adaptMechanism struct{ m kgsasl.Mechanism }

func (a adaptMechanism) Name() string { return a.m.Name() }

func (a adaptMechanism) Authenticate(ctx context.Context, hostport string) (sasl.Session, []byte, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	port, _ := strconv.Atoi(portStr)
	ctx = kgsasl.WithMetadata(ctx, &kgsasl.Metadata{Host: host, Port: port})
	sm, first, err := a.m.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	return adaptSession{ctx: ctx, sm: sm}, first, nil
}

// adaptSession keeps the context Authenticate was given, which kgo documents as valid for the
// whole session (kgo's Session interface has no context of its own).
type adaptSession struct {
	ctx context.Context //nolint:containedctx // the session's lifetime is the handshake's
	sm  kgsasl.StateMachine
}

func (s adaptSession) Challenge(challenge []byte) (bool, []byte, error) {
	return s.sm.Next(s.ctx, challenge)
}
