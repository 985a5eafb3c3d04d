package kafkatxn

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/internal/testcert"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
)

// roundTrip opens a session with o, commits a record and a checkpoint, and reads both back.
func roundTrip(t *testing.T, addrs []string, o Options, read ...kgo.Opt) {
	t.Helper()
	s := open(t, o)
	ctx := testCtx(t)
	if err := s.Send(ctx, msgs("a", 0, 3)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := s.Save(ctx, cp(t, 3)); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if got := load(t, s); got == nil || got.GTIDSet != "0-1-3" {
		t.Fatalf("Load = %+v", got)
	}
	if rs := readCommitted(t, addrs, eventsTopic, read...); len(rs) != 3 {
		t.Fatalf("read back %d records, want 3", len(rs))
	}
}

func TestSCRAMCluster(t *testing.T) {
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c := cluster(t, kfake.EnableSASL(), kfake.Superuser(mech, "outboxd", "s3cret"))
			o := options(c.ListenAddrs(), nil)
			o.SASL = &kafka.SASL{Mechanism: mech, Username: "outboxd", Password: "s3cret"}
			auth := scram.Auth{User: "outboxd", Pass: "s3cret"}
			m := auth.AsSha256Mechanism()
			if mech == "SCRAM-SHA-512" {
				m = auth.AsSha512Mechanism()
			}
			roundTrip(t, c.ListenAddrs(), o, kgo.SASL(m))

			o.SASL = &kafka.SASL{Mechanism: mech, Username: "outboxd", Password: "wrong"}
			if s, err := Open(testCtx(t), o); err == nil {
				s.Close()
				t.Fatal("Open with a wrong password succeeded")
			} else if strings.Contains(err.Error(), "wrong") || !strings.Contains(err.Error(), "was rejected by the broker (check sasl.username") {
				t.Fatalf("Open with a wrong password: %v (want what to check, without the password)", err)
			}
		})
	}
}

func TestClientCertificateCluster(t *testing.T) {
	certs, good, stranger := testcert.MutualT(t, "kafka CA", "outboxd")
	c := cluster(t, kfake.TLS(certs.RequireClientTLS()))
	o := options(c.ListenAddrs(), nil)
	o.TLS = &tls.Config{RootCAs: certs.Pool(), Certificates: []tls.Certificate{good.Cert}, MinVersion: tls.VersionTLS12}
	roundTrip(t, c.ListenAddrs(), o, kgo.DialTLSConfig(o.TLS.Clone()))

	o.TLS = &tls.Config{RootCAs: certs.Pool(), Certificates: []tls.Certificate{stranger.Cert}, MinVersion: tls.VersionTLS12}
	if s, err := Open(testCtx(t), o); err == nil {
		s.Close()
		t.Fatal("Open with another CA's certificate succeeded")
	}
	o.TLS = &tls.Config{RootCAs: certs.Pool(), MinVersion: tls.VersionTLS12}
	if s, err := Open(testCtx(t), o); err == nil {
		s.Close()
		t.Fatal("Open without a client certificate succeeded")
	} else if !strings.Contains(err.Error(), "set tls.cert_file and tls.key_file") {
		t.Fatalf("Open without a client certificate: %v (want what to set)", err)
	}
}

// TestOAuthTokenReadPerConnection: the adapter runs sink/kafka's OAUTHBEARER, which reads the
// token file at each new connection's handshake (kfake has no OAUTHBEARER; sink/kafka's tests
// run the exchange against a gate in front of kfake).
func TestOAuthTokenReadPerConnection(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	mech, err := kafka.Mechanism(kafka.SASL{Mechanism: "OAUTHBEARER", TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	a := newAdapter(mech)
	for _, token := range []string{"token-one", "token-two"} {
		if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sess, first, err := a.Authenticate(testCtx(t), "broker:9092")
		if err != nil {
			t.Fatal(err)
		}
		if want := "n,,\x01auth=Bearer " + token + "\x01\x01"; string(first) != want {
			t.Fatalf("initial response %q, want %q", first, want)
		}
		if done, _, err := sess.Challenge(nil); !done || err != nil {
			t.Fatalf("accepting broker: done %v, %v", done, err)
		}
	}
	if a.Name() != "OAUTHBEARER" {
		t.Fatal(a.Name())
	}
}

// TestMSKIAMSignsTheBrokerHost: AWS_MSK_IAM through the adapter signs the host kgo dials, with
// credentials from the standard chain (here the environment) and sasl.region.
func TestMSKIAMSignsTheBrokerHost(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	mech, err := kafka.Mechanism(kafka.SASL{Mechanism: "AWS_MSK_IAM", Region: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := newAdapter(mech).Authenticate(testCtx(t), "b-1.msk.example:9098")
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]string
	if err := json.Unmarshal(first, &payload); err != nil {
		t.Fatalf("payload %q: %v", first, err)
	}
	if payload["host"] != "b-1.msk.example" || payload["action"] != "kafka-cluster:Connect" ||
		!bytes.Contains([]byte(payload["x-amz-credential"]), []byte("/eu-west-1/kafka-cluster/")) {
		t.Fatalf("signed payload %v", payload)
	}
	if bytes.Contains(first, []byte("wJalrXUtnFEMI")) {
		t.Fatal("the secret key is in the payload")
	}
}

// TestTransactionalIDNotAuthorized: a principal without WRITE on its TransactionalId is refused
// at Open with what to grant, wrapping sink.ErrFenced (nothing can ever be sent).
func TestTransactionalIDNotAuthorized(t *testing.T) {
	topicACL := func(name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	c := cluster(t, kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "outboxd", "pw", topicACL("*", kmsg.ACLOperationAll)))
	o := options(c.ListenAddrs(), nil)
	o.SASL = &kafka.SASL{Mechanism: "PLAIN", Username: "outboxd", Password: "pw"}
	var fenced int
	o.OnFenced = func() { fenced++ }
	s, err := Open(testCtx(t), o)
	if err == nil {
		s.Close()
		t.Fatal("Open without an ACL on the transactional id succeeded")
	}
	if !errors.Is(err, sink.ErrFenced) || !strings.Contains(err.Error(), "grant this principal WRITE and DESCRIBE on TransactionalId outboxd-orders") {
		t.Fatalf("Open without an ACL on the transactional id: %v", err)
	}
	if fenced != 1 {
		t.Fatalf("OnFenced called %d times, want 1", fenced)
	}
}
