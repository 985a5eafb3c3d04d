package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxd/outboxd/internal/testcert"
	"github.com/outboxd/outboxd/sink"
)

// secureCluster is a kfake cluster that accepts only TLS connections authenticated with SASL, with
// one superuser per mechanism, and a franz-go admin client to read back what was stored.
func secureCluster(t *testing.T) (addrs []string, certs *testcert.Set, adm *kadm.Client) {
	t.Helper()
	certs, err := testcert.New(t.TempDir(), "outboxd test CA")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(certs.ServerTLS()), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plainuser", "plain-pw"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "scram256-pw"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "scram512-pw"),
		kfake.SeedTopics(1, "secure"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: certs.Pool()}),
		kgo.SASL(plain.Auth{User: "plainuser", Pass: "plain-pw"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c.ListenAddrs(), certs, kadm.NewClient(cl)
}

func endOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lo, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	var n int64
	lo.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func TestTLSAndSASLDeliver(t *testing.T) {
	addrs, certs, adm := secureCluster(t)
	for i, m := range []struct{ mech, user, pw string }{
		{"PLAIN", "plainuser", "plain-pw"},
		{"SCRAM-SHA-256", "scram256", "scram256-pw"},
		{"SCRAM-SHA-512", "scram512", "scram512-pw"},
	} {
		t.Run(m.mech, func(t *testing.T) {
			s, err := New("sec", Config{Brokers: addrs, Timeout: 5 * time.Second,
				TLS:  &tls.Config{RootCAs: certs.Pool(), ServerName: "localhost"},
				SASL: &SASL{Mechanism: m.mech, Username: m.user, Password: m.pw}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Check(ctx, []string{"secure"}); err != nil {
				t.Fatalf("Check: %v", err)
			}
			msgs := []*sink.Message{{Topic: "secure", Key: []byte("k"), Value: []byte(m.mech)}}
			if err := s.Send(ctx, msgs); err != nil {
				t.Fatalf("Send: %v", err)
			}
			if got := endOffset(t, adm, "secure"); got != int64(i+1) {
				t.Fatalf("topic holds %d records after %d sends", got, i+1)
			}
		})
	}
}

func TestSASLWrongPasswordFailsClearly(t *testing.T) {
	addrs, certs, _ := secureCluster(t)
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256"} {
		t.Run(mech, func(t *testing.T) {
			user := map[string]string{"PLAIN": "plainuser", "SCRAM-SHA-256": "scram256"}[mech]
			s, err := New("sec", Config{Brokers: addrs, Timeout: 3 * time.Second,
				TLS:  &tls.Config{RootCAs: certs.Pool()},
				SASL: &SASL{Mechanism: mech, Username: user, Password: "wrong-password"}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = s.Send(ctx, []*sink.Message{{Topic: "secure", Value: []byte("x")}})
			if err == nil {
				t.Fatal("Send with a wrong password succeeded")
			}
			if !strings.Contains(err.Error(), "SASL") || !strings.Contains(err.Error(), mech) {
				t.Fatalf("error does not name SASL and %s: %v", mech, err)
			}
			if strings.Contains(err.Error(), "wrong-password") {
				t.Fatalf("error holds the password: %v", err)
			}
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("error is not ErrAuth: %v", err)
			}
			// Not permanent: a credential problem is not the message's fault, so it must never
			// make a row poison (dead-lettered); the pipeline retries until it is fixed.
			if sink.IsPermanent(err) {
				t.Fatalf("auth failure classified permanent: %v", err)
			}
			if err := s.Check(ctx, []string{"secure"}); err == nil || !errors.Is(err, ErrAuth) {
				t.Fatalf("Check = %v, want ErrAuth", err)
			}
		})
	}
}

func TestTLSWrongCAFails(t *testing.T) {
	addrs, _, _ := secureCluster(t)
	other, err := testcert.New(t.TempDir(), "some other CA")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New("sec", Config{Brokers: addrs, Timeout: 3 * time.Second,
		TLS:  &tls.Config{RootCAs: other.Pool()},
		SASL: &SASL{Mechanism: "PLAIN", Username: "plainuser", Password: "plain-pw"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Check(ctx, []string{"secure"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Check with the wrong CA = %v, want a certificate error", err)
	}
}
