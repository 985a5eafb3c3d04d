package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/segmentio/kafka-go/sasl"
)

const mechOAuthBearer = "OAUTHBEARER"

// maxTokenBytes bounds the token read: a mistaken path such as /dev/zero must fail, not fill
// memory. JWTs of real identity providers are a few KiB.
const maxTokenBytes = 64 << 10

// oauthBearer is SASL OAUTHBEARER (RFC 7628, as Kafka's KIP-255 uses it) with the token read
// from a file at every handshake. Re-reading per handshake rather than watching the file's
// mtime: handshakes happen once per broker connection, so the read costs nothing measurable;
// it needs no goroutine; and it cannot miss a change that mtime would hide (a same-second
// rewrite, or a Kubernetes projected volume that swaps a symlink and keeps the old mtime).
// Safe for concurrent use.
type oauthBearer struct {
	tokenFile string
}

func (m *oauthBearer) Name() string { return mechOAuthBearer }

// Start reads the token now, so each new connection carries the file's current content, and
// returns the client's initial response: the GS2 header "n,," then kvpairs separated by 0x01,
// "auth=Bearer <token>", closed by two 0x01 (RFC 7628 section 3.1).
func (m *oauthBearer) Start(context.Context) (sasl.StateMachine, []byte, error) {
	token, err := readToken(m.tokenFile)
	if err != nil {
		return nil, nil, err
	}
	return oauthState{}, oauthInitialResponse(token), nil
}

func oauthInitialResponse(token []byte) []byte {
	out := make([]byte, 0, len(token)+len("n,,\x01auth=Bearer \x01\x01"))
	out = append(out, "n,,\x01auth=Bearer "...)
	out = append(out, token...)
	return append(out, 0x01, 0x01)
}

func readToken(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("OAUTHBEARER: sasl.token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("OAUTHBEARER: sasl.token_file: %w", err)
	}
	if len(b) > maxTokenBytes {
		return nil, fmt.Errorf("OAUTHBEARER: sasl.token_file %s is larger than %d bytes", name, maxTokenBytes)
	}
	token := bytes.TrimSpace(b)
	if len(token) == 0 {
		return nil, fmt.Errorf("OAUTHBEARER: sasl.token_file %s is empty", name)
	}
	// A token is a 1*VSCHAR run (RFC 6750 b64token and JWTs alike): a control byte would end
	// the kvpair early and the broker would read a different token.
	for _, c := range token {
		if c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("OAUTHBEARER: sasl.token_file %s holds a byte that cannot be in a bearer token (0x%02x); keep only the token in it", name, c)
		}
	}
	return token, nil
}

type oauthState struct{}

// Next ends the exchange: a broker that accepts answers with an empty challenge; one that
// rejects sends a JSON error (RFC 7628 section 3.2.2), which carries no secret.
func (oauthState) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if len(challenge) == 0 {
		return true, nil, nil
	}
	return false, nil, fmt.Errorf("OAUTHBEARER: the broker refused the token: %s", challenge)
}
