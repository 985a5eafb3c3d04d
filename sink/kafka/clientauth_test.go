package kafka

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testcert"
	"github.com/outboxd/outboxd/sink"
)

// TestClientCertificateRequired runs against a kfake cluster whose listener demands a client
// certificate signed by its CA (ssl.client.auth=required): the sink, given its TLS by the
// config package from cert_file and key_file as outboxd does, delivers; without a certificate,
// or with one from another CA, it is refused.
func TestClientCertificateRequired(t *testing.T) {
	certs, good, stranger := testcert.MutualT(t, "kafka CA", "outboxd")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(certs.RequireClientTLS()), kfake.SeedTopics(1, "mtls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	reader, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: certs.Pool(), Certificates: []tls.Certificate{good.Cert}}),
		kgo.ConsumeTopics("mtls"), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)

	send := func(t *testing.T, st *config.SinkTLS) error {
		tc, err := st.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		s, err := New("mtls", Config{Brokers: c.ListenAddrs(), Timeout: 3 * time.Second, TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.Send(ctx, []*sink.Message{{Topic: "mtls", Key: []byte("k"), Value: []byte("with a client certificate")}})
	}
	t.Run("with the certificate", func(t *testing.T) {
		if err := send(t, &config.SinkTLS{CAFile: certs.CAFile, CertFile: good.CertFile, KeyFile: good.KeyFile}); err != nil {
			t.Fatalf("Send with the client certificate: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fs := reader.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "with a client certificate" {
			t.Fatalf("read back %d records: %v", len(recs), recs)
		}
	})
	for name, st := range map[string]*config.SinkTLS{
		"without a certificate":  {CAFile: certs.CAFile},
		"with another CA's cert": {CAFile: certs.CAFile, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile},
	} {
		t.Run(name, func(t *testing.T) {
			err := send(t, st)
			if err == nil {
				t.Fatal("the broker accepted a send it must refuse")
			}
			if !strings.Contains(err.Error(), "the broker requires a client certificate (set tls.cert_file and tls.key_file") {
				t.Fatalf("error does not say what to set: %v", err)
			}
		})
	}
}

// oauthGate puts SASL OAUTHBEARER in front of a kfake broker, which has no OAUTHBEARER of its
// own: each accepted connection must pass ApiVersions, SaslHandshake(OAUTHBEARER) and
// SaslAuthenticate with the expected token before any other request reaches kfake; a request
// before that closes the connection, as a broker with only a SASL listener does. It answers
// with the Kafka protocol itself (kmsg), so the sink's exchange is the one a broker sees.
type oauthGate struct {
	mu    sync.Mutex
	want  string
	conns []*gateConn
	// seen counts successful authentications per token; refused counts rejected ones.
	seen    map[string]int
	refused int
}

func (g *oauthGate) listen(network, address string) (net.Listener, error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return gateListener{l, g}, nil
}

// rotate makes token the only one accepted and drops every connection, as a broker does when
// a session's token expires (KIP-368 re-authentication aside).
func (g *oauthGate) rotate(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.want = token
	for _, c := range g.conns {
		c.Conn.Close()
	}
	g.conns = nil
}

type gateListener struct {
	net.Listener
	g *oauthGate
}

func (l gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &gateConn{Conn: c, g: l.g}
	l.g.mu.Lock()
	l.g.conns = append(l.g.conns, gc)
	l.g.mu.Unlock()
	return gc, nil
}

type gateConn struct {
	net.Conn
	g       *oauthGate
	wmu     sync.Mutex
	authed  bool
	pending []byte
}

func (c *gateConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(b)
}

// Read hands kfake the client's bytes once authenticated; before that it hands on only
// ApiVersions and answers the SASL requests itself.
func (c *gateConn) Read(b []byte) (int, error) {
	for !c.authed && len(c.pending) == 0 {
		frame, err := readFrame(c.Conn)
		if err != nil {
			return 0, err
		}
		key := int16(binary.BigEndian.Uint16(frame[4:]))
		switch key {
		case 18: // ApiVersions: kfake answers it.
			c.pending = frame
		case 17, 36:
			if err := c.sasl(frame); err != nil {
				c.Conn.Close()
				return 0, err
			}
		default:
			c.Conn.Close()
			return 0, fmt.Errorf("request key %d before SASL authentication", key)
		}
	}
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 1<<20 || n < 8 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// sasl answers a SaslHandshake or SaslAuthenticate frame.
func (c *gateConn) sasl(frame []byte) error {
	body := frame[4:]
	key, version := int16(binary.BigEndian.Uint16(body)), int16(binary.BigEndian.Uint16(body[2:]))
	corr := body[4:8]
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	rest := body[8:]
	clientIDLen := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if clientIDLen > 0 {
		rest = rest[clientIDLen:]
	}
	if req.IsFlexible() {
		if rest[0] != 0 {
			return errors.New("tagged header fields are not expected")
		}
		rest = rest[1:]
	}
	if err := req.ReadFrom(rest); err != nil {
		return err
	}
	var resp kmsg.Response
	switch r := req.(type) {
	case *kmsg.SASLHandshakeRequest:
		hr := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.SupportedMechanisms = []string{mechOAuthBearer}
		if r.Mechanism != mechOAuthBearer {
			hr.ErrorCode = 33 // UNSUPPORTED_SASL_MECHANISM
		}
		resp = hr
	case *kmsg.SASLAuthenticateRequest:
		ar := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		c.g.mu.Lock()
		want := "n,,\x01auth=Bearer " + c.g.want + "\x01\x01"
		if string(r.SASLAuthBytes) == want {
			c.authed = true
			c.g.seen[c.g.want]++
		} else {
			c.g.refused++
			ar.ErrorCode = 58 // SASL_AUTHENTICATION_FAILED
			msg := "Authentication failed: invalid token"
			ar.ErrorMessage = &msg
		}
		c.g.mu.Unlock()
		resp = ar
	}
	resp.SetVersion(version)
	out := append([]byte{0, 0, 0, 0}, corr...)
	if resp.IsFlexible() {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	_, err := c.Write(out)
	return err
}

// TestOAuthBearer runs against kfake behind oauthGate: the sink authenticates with the token
// in sasl.token_file; after the file is rewritten and the broker drops its connections, the
// next connection carries the new token without a restart; a wrong token is refused with
// ErrAuth naming the mechanism and the file, never the token.
func TestOAuthBearer(t *testing.T) {
	g := &oauthGate{want: "token-one", seen: map[string]int{}}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(g.listen), kfake.SeedTopics(1, "oauth"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	file := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		if err := os.WriteFile(file+".tmp", []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Replaced by rename, as token agents do: the reader never sees half a token.
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("token-one")
	s, err := New("oauth", Config{Brokers: c.ListenAddrs(), Timeout: 3 * time.Second,
		SASL: &SASL{Mechanism: mechOAuthBearer, TokenFile: file}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send := func(v string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.Send(ctx, []*sink.Message{{Topic: "oauth", Key: []byte("k"), Value: []byte(v)}})
	}
	if err := send("first"); err != nil {
		t.Fatalf("Send with token-one: %v", err)
	}

	write("token-two")
	g.rotate("token-two")
	// The dropped connection fails the next attempt or two; the pipeline retries such errors.
	var lastErr error
	for i := 0; i < 20; i++ {
		if lastErr = send("second"); lastErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("Send after the token file changed: %v", lastErr)
	}
	g.mu.Lock()
	one, two := g.seen["token-one"], g.seen["token-two"]
	g.mu.Unlock()
	if one == 0 || two == 0 {
		t.Fatalf("authentications by token: one=%d two=%d; want both used", one, two)
	}

	write("stale-token")
	g.rotate("token-three")
	var err2 error
	for i := 0; i < 5; i++ {
		if err2 = send("third"); errors.Is(err2, ErrAuth) {
			break
		}
	}
	if !errors.Is(err2, ErrAuth) || !strings.Contains(err2.Error(), "OAUTHBEARER") || !strings.Contains(err2.Error(), file) {
		t.Fatalf("Send with a stale token = %v; want ErrAuth naming OAUTHBEARER and %s", err2, file)
	}
	if strings.Contains(err2.Error(), "stale-token") {
		t.Fatalf("the error shows the token: %v", err2)
	}
}

// TestOAuthBearerMessage checks the client's initial response against RFC 7628 section 3.1
// byte for byte, and the token file's problems.
func TestOAuthBearerMessage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("  eyJhbGciOiJSUzI1NiJ9.e30.c2ln \r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, ir, err := (&oauthBearer{tokenFile: file}).Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := "n,,\x01auth=Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln\x01\x01"; string(ir) != want {
		t.Fatalf("initial response %q, want %q", ir, want)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("a\x01b"), 0o600); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{filepath.Join(dir, "none"): "no such file", bad: "cannot be in a bearer token", "/dev/null": "is empty"} {
		if _, _, err := (&oauthBearer{tokenFile: f}).Start(context.Background()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("token file %s: %v, want %q", f, err, want)
		}
	}
}

// TestMSKIAMFirstMessage checks AWS_MSK_IAM's only client message. kfake cannot verify SigV4,
// so the test computes the signature itself, independently of the SDK, from fixed credentials
// and a fixed clock following AWS's SigV4 presigning rules, and compares every field.
func TestMSKIAMFirstMessage(t *testing.T) {
	const host, region, akid, secret, session = "b-1.demo.kafka.eu-west-1.amazonaws.com", "eu-west-1", "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := newMSKIAMWith(credentials.NewStaticCredentialsProvider(akid, secret, session), region)
	m.inner.SignTime = at
	ctx := sasl.WithMetadata(context.Background(), &sasl.Metadata{Host: host, Port: 9098})
	_, ir, err := m.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(ir, &got); err != nil {
		t.Fatalf("first message is not a JSON object of strings: %v\n%s", err, ir)
	}

	date, stamp := "20260102", "20260102T030405Z"
	scope := date + "/" + region + "/kafka-cluster/aws4_request"
	q := url.Values{"Action": {"kafka-cluster:Connect"}, "X-Amz-Algorithm": {"AWS4-HMAC-SHA256"},
		"X-Amz-Credential": {akid + "/" + scope}, "X-Amz-Date": {stamp}, "X-Amz-Expires": {"300"},
		"X-Amz-Security-Token": {session}, "X-Amz-SignedHeaders": {"host"}}
	canonicalQuery := strings.ReplaceAll(q.Encode(), "+", "%20")
	emptyHash := sha256.Sum256(nil)
	canonical := "GET\n/\n" + canonicalQuery + "\nhost:" + host + "\n\nhost\n" + hex.EncodeToString(emptyHash[:])
	ch := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	k := mac(mac(mac(mac([]byte("AWS4"+secret), date), region), "kafka-cluster"), "aws4_request")

	want := map[string]string{
		"version": "2020_10_22", "host": host, "action": "kafka-cluster:Connect",
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": akid + "/" + scope,
		"x-amz-date": stamp, "x-amz-expires": "300", "x-amz-security-token": session,
		"x-amz-signedheaders": "host", "x-amz-signature": hex.EncodeToString(mac(k, toSign)),
	}
	for key, v := range want {
		if got[key] != v {
			t.Errorf("%s = %q, want %q", key, got[key], v)
		}
	}
	if !strings.HasPrefix(got["user-agent"], "kafka-go/sasl/aws_msk_iam_v2/") {
		t.Errorf("user-agent = %q", got["user-agent"])
	}
	if len(got) != len(want)+1 {
		t.Errorf("first message has fields beyond the protocol's: %s", ir)
	}
	if bytes.Contains(ir, []byte(secret)) {
		t.Error("the first message holds the secret key")
	}

	// Without credentials, the handshake fails naming the standard chain.
	none := newMSKIAMWith(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no EC2 IMDS role found")
	}), region)
	if _, _, err := none.Start(ctx); err == nil || !strings.Contains(err.Error(), "standard chain") {
		t.Fatalf("Start without credentials = %v", err)
	}
}

func TestMSKIAMNeedsARegion(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	_, err := New("msk", Config{Brokers: []string{"127.0.0.1:9098"}, SASL: &SASL{Mechanism: mechAWSMSKIAM}})
	if err == nil || !strings.Contains(err.Error(), "set sasl.region") {
		t.Fatalf("New without a region = %v", err)
	}
	if _, err := New("msk", Config{Brokers: []string{"127.0.0.1:9098"}, SASL: &SASL{Mechanism: mechAWSMSKIAM, Region: "eu-west-1"}}); err != nil {
		t.Fatalf("New with a region: %v", err)
	}
}

// TestCompressionReadBack sends with each codec and reads back with franz-go, which
// decompresses: every key, value and header must come back byte for byte, and the batches
// kfake received must carry the codec in their attributes.
func TestCompressionReadBack(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	codecs := map[int16]bool{}
	e.c.KeepControl()
	e.c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range r.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				if len(p.Records) >= 23 {
					mu.Lock()
					codecs[int16(binary.BigEndian.Uint16(p.Records[21:]))&0x7] = true
					mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(name, func(t *testing.T) {
			codec, err := Codec(name)
			if err != nil {
				t.Fatal(err)
			}
			s := e.sink(t, func(c *Config) { c.Compression = codec })
			topic := e.topic(t, 1)
			var msgs []*sink.Message
			for i := range 50 {
				random := make([]byte, 64)
				_, _ = rand.Read(random)
				msgs = append(msgs, &sink.Message{Topic: topic, Key: []byte(fmt.Sprintf("key-%d", i)),
					Value:   append(bytes.Repeat([]byte(`{"order":"compressible"}`), 20), random...),
					Headers: []sink.Header{{Key: "event_id", Value: []byte(fmt.Sprint(i))}, {Key: "bin", Value: random[:8]}}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Send(ctx, msgs); err != nil {
				t.Fatalf("Send: %v", err)
			}
			got := e.read(t, topic, len(msgs))
			if len(got) != len(msgs) {
				t.Fatalf("read %d records, sent %d", len(got), len(msgs))
			}
			for i, r := range got {
				m := msgs[i]
				if !bytes.Equal(r.Key, m.Key) || !bytes.Equal(r.Value, m.Value) || len(r.Headers) != len(m.Headers) {
					t.Fatalf("record %d differs: got key %q value %d bytes, %d headers", i, r.Key, len(r.Value), len(r.Headers))
				}
				for j, h := range r.Headers {
					if h.Key != m.Headers[j].Key || !bytes.Equal(h.Value, m.Headers[j].Value) {
						t.Fatalf("record %d header %d = %q:%x, want %q:%x", i, j, h.Key, h.Value, m.Headers[j].Key, m.Headers[j].Value)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !codecs[int16(codec)] {
				t.Fatalf("no produced batch carried codec %d (%s); saw %v", codec, name, codecs)
			}
		})
	}
}
