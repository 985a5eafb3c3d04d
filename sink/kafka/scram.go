package kafka

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
)

// scramMechanism is a SCRAM-SHA-256/512 client (RFC 5802, RFC 7677) for kafka-go's Transport.
// It is written here because kafka-go's sasl/scram pulls in a module outside go.mod; usernames
// and passwords are used as given (no SASLprep), which is exact for ASCII credentials.
type scramMechanism struct {
	name     string
	hash     func() hash.Hash
	user     string
	password string
}

func newSCRAM(mechanism, user, password string) (*scramMechanism, error) {
	switch mechanism {
	case "SCRAM-SHA-256":
		return &scramMechanism{name: mechanism, hash: sha256.New, user: user, password: password}, nil
	case "SCRAM-SHA-512":
		return &scramMechanism{name: mechanism, hash: sha512.New, user: user, password: password}, nil
	}
	return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
}

func (m *scramMechanism) Name() string { return m.name }

// Start sends client-first-message. Safe for concurrent use: each call has its own state.
func (m *scramMechanism) Start(context.Context) (sasl.StateMachine, []byte, error) {
	nonce := make([]byte, 24)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, fmt.Errorf("SCRAM nonce: %w", err)
	}
	st := &scramState{m: m, cnonce: base64.RawStdEncoding.EncodeToString(nonce)}
	name := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(m.user)
	st.firstBare = "n=" + name + ",r=" + st.cnonce
	return st, []byte("n,," + st.firstBare), nil
}

type scramState struct {
	m         *scramMechanism
	cnonce    string
	firstBare string
	serverSig []byte
}

func (s *scramState) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if s.serverSig != nil {
		// server-final-message: v=signature or e=error.
		attrs := parseSCRAM(string(challenge))
		if e, ok := attrs["e"]; ok {
			return false, nil, fmt.Errorf("SCRAM: server error %q", e)
		}
		v, err := base64.StdEncoding.DecodeString(attrs["v"])
		if err != nil || !hmac.Equal(v, s.serverSig) {
			return false, nil, errors.New("SCRAM: the server's signature does not match (not the broker it claims to be?)")
		}
		return true, nil, nil
	}
	serverFirst := string(challenge)
	attrs := parseSCRAM(serverFirst)
	nonce, saltB64, iterStr := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, s.cnonce) || len(nonce) == len(s.cnonce) {
		return false, nil, errors.New("SCRAM: the server's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(saltB64)
	if err != nil {
		return false, nil, fmt.Errorf("SCRAM: salt: %w", err)
	}
	iter, err := strconv.Atoi(iterStr)
	if err != nil || iter < 1 || iter > 1<<20 {
		return false, nil, fmt.Errorf("SCRAM: iteration count %q out of range", iterStr)
	}
	h := s.m.hash
	salted, err := pbkdf2.Key(h, s.m.password, salt, iter, h().Size())
	if err != nil {
		return false, nil, fmt.Errorf("SCRAM: %w", err)
	}
	clientKey := hmacSum(h, salted, "Client Key")
	stored := h()
	stored.Write(clientKey)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte("n,,")) + ",r=" + nonce
	authMsg := s.firstBare + "," + serverFirst + "," + withoutProof
	sig := hmacSum(h, stored.Sum(nil), authMsg)
	proof := make([]byte, len(clientKey))
	for i := range clientKey {
		proof[i] = clientKey[i] ^ sig[i]
	}
	s.serverSig = hmacSum(h, hmacSum(h, salted, "Server Key"), authMsg)
	return false, []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

func hmacSum(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

func parseSCRAM(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && len(k) == 1 {
			if _, dup := out[k]; !dup {
				out[k] = v
			}
		}
	}
	return out
}
