package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// authTracker wraps the SASL mechanism to remember whether the latest handshake finished: a
// broker that rejects credentials may just close the connection (kfake does; Kafka sends code 58
// first), which kafka-go reports as a bare EOF. Safe for concurrent use.
type authTracker struct {
	mech sasl.Mechanism
	// rejected describes a rejection and what to check, never with a secret (SASL.rejected).
	rejected string
	// started and finished count handshakes; started > finished right after a failure.
	started, finished atomic.Int64
}

func (a *authTracker) Name() string { return a.mech.Name() }

func (a *authTracker) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	a.started.Add(1)
	sm, resp, err := a.mech.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &trackedState{sm: sm, a: a}, resp, nil
}

type trackedState struct {
	sm   sasl.StateMachine
	a    *authTracker
	done bool
}

func (t *trackedState) Next(ctx context.Context, challenge []byte) (bool, []byte, error) {
	done, resp, err := t.sm.Next(ctx, challenge)
	if done && err == nil && !t.done {
		t.done = true
		t.a.finished.Add(1)
		// A success resets the count, so one old failed handshake cannot taint later errors.
		t.a.started.Store(t.a.finished.Load())
	}
	return done, resp, err
}

// failing reports whether the most recent handshake did not finish.
func (a *authTracker) failing() bool {
	return a != nil && a.started.Load() > a.finished.Load()
}

// errNeedsClientCert marks a connection the broker refused for want of a client certificate.
var errNeedsClientCert = errors.New("the broker requires a client certificate")

// authError wraps err with ErrAuth and the mechanism and user when it comes from SASL: a SASL
// error code from the broker, or any error while the latest handshake is unfinished. Other
// errors, and every error of a sink without SASL, come back unchanged. The password is never
// part of the message.
func (s *Sink) authError(err error) error {
	if err == nil || errors.Is(err, ErrAuth) || errors.Is(err, errNeedsClientCert) {
		return err
	}
	// The TLS alert "certificate required" (116) comes back as text from crypto/tls.
	if strings.Contains(err.Error(), "tls: certificate required") {
		return fmt.Errorf("%w (set tls.cert_file and tls.key_file to a certificate the broker's CA signed): %w", errNeedsClientCert, err)
	}
	if s.auth == nil {
		return err
	}
	var code kafkago.Error
	isCode := errors.As(err, &code) && (code == kafkago.SASLAuthenticationFailed ||
		code == kafkago.UnsupportedSASLMechanism || code == kafkago.IllegalSASLState)
	if !isCode && !s.auth.failing() {
		return err
	}
	return fmt.Errorf("%w: SASL %s %s: %w", ErrAuth, s.auth.Name(), s.auth.rejected, err)
}
