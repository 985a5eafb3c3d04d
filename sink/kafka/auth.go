package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// authTracker wraps the SASL mechanism to remember whether the latest handshake finished: a
// broker that rejects credentials may just close the connection (kfake does; Kafka sends code 58
// first), which kafka-go reports as a bare EOF. Safe for concurrent use.
type authTracker struct {
	mech sasl.Mechanism
	user string
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

// authError wraps err with ErrAuth and the mechanism and user when it comes from SASL: a SASL
// error code from the broker, or any error while the latest handshake is unfinished. Other
// errors, and every error of a sink without SASL, come back unchanged. The password is never
// part of the message.
func (s *Sink) authError(err error) error {
	if err == nil || s.auth == nil || errors.Is(err, ErrAuth) {
		return err
	}
	var code kafkago.Error
	isCode := errors.As(err, &code) && (code == kafkago.SASLAuthenticationFailed ||
		code == kafkago.UnsupportedSASLMechanism || code == kafkago.IllegalSASLState)
	if !isCode && !s.auth.failing() {
		return err
	}
	return fmt.Errorf("%w: SASL %s as user %q was rejected by the broker (check sasl.username, sasl.password and the mechanism the broker enables): %w",
		ErrAuth, s.auth.Name(), s.auth.user, err)
}
