package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testcert"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Client certificates on both sides: a MariaDB whose user is created REQUIRE X509 and a kfake
// cluster that demands a client certificate. outboxd, with source.tls's key from ${VAR} and the
// sink's from key_file, passes check, relays a row (zstd-compressed) and prints no key; without
// the MySQL certificate or without the Kafka one, check fails naming what to set.
func TestClientCertificatesRelay(t *testing.T) {
	mariadb.RequireT(t)
	certs, err := testcert.New(t.TempDir(), "e2e CA")
	if err != nil {
		t.Fatal(err)
	}
	dbCert, err := certs.Client("outboxd-mysql")
	if err != nil {
		t.Fatal(err)
	}
	kCert, err := certs.Client("outboxd-kafka")
	if err != nil {
		t.Fatal(err)
	}
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{
		"--ssl-ca=" + certs.CAFile, "--ssl-cert=" + certs.CertFile, "--ssl-key=" + certs.KeyFile}})
	w := newWorld(t, srv)
	w.exec("CREATE USER 'x509relay'@'%' IDENTIFIED BY 'x509-pw' REQUIRE X509")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'x509relay'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'x509relay'@'%'")

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.TLS(certs.RequireClientTLS()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	t.Setenv("OUTBOXD_E2E_MYSQL_KEY", string(dbCert.KeyPEM)) // inherited by the child processes

	dir := t.TempDir()
	admin := admFreeAddr(t)
	const sourceCert, sinkCert = "SOURCE_CERT", "SINK_CERT"
	cfg := fmt.Sprintf(`source:
  flavor: mariadb
  addr: %s
  user: x509relay
  password: x509-pw
  server_id: %d
  start: %q
  tls: {mode: verify-identity, ca_file: %s, server_name: localhost%s}
tables: [{table: %s.outbox_event}]
sinks:
  main:
    type: kafka
    brokers: [%q]
    compression: zstd
    tls: {ca_file: %s%s}
routes: [{sink: main, topic: t}]
checkpoint: {path: %s, interval: 200ms}
admin: {listen: %q}
log: {level: debug, format: json}
`, srv.Addr, 1000+int(serverIDs.Add(1)), w.position(), certs.CAFile, sourceCert, w.schema,
		kc.ListenAddrs()[0], certs.CAFile, sinkCert, filepath.Join(dir, "checkpoint.json"), admin)
	write := func(name string, withSource, withSink bool) string {
		y := cfg
		if withSource {
			y = strings.Replace(y, sourceCert, ", cert_file: "+dbCert.CertFile+`, key: "${OUTBOXD_E2E_MYSQL_KEY}"`, 1)
		}
		if withSink {
			y = strings.Replace(y, sinkCert, ", cert_file: "+kCert.CertFile+", key_file: "+kCert.KeyFile, 1)
		}
		y = strings.NewReplacer(sourceCert, "", sinkCert, "").Replace(y)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	for _, tc := range []struct {
		name             string
		withSource, sink bool
		want             string
	}{
		{"no MySQL certificate", false, true, "Access denied"},
		{"no Kafka certificate", true, false, "set tls.cert_file and tls.key_file"},
	} {
		code, out := runBinary(t, "check", "--config", write(tc.name+".yaml", tc.withSource, tc.sink))
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("check with %s exited %d, want a failure saying %q:\n%s", tc.name, code, tc.want, out)
		}
	}

	good := write("outboxd.yaml", true, true)
	code, checkOut := runBinary(t, "check", "--config", good)
	if code != 0 {
		t.Fatalf("check exited %d:\n%s", code, checkOut)
	}
	p := startBinary(t, "run", "--config", good)
	admWaitReady(t, admin, 200, 30*time.Second)
	w.commit(row{EventID: "x509-1", Key: "k", Topic: "t", Payload: []byte(`{"over":"mutual TLS"}`)})

	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DialTLSConfig(&tls.Config{RootCAs: certs.Pool(), Certificates: []tls.Certificate{kCert.Cert}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got *kgo.Record
	for got == nil && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if header(r, "event_id") == "x509-1" {
				got = r
			}
		})
	}
	if got == nil {
		t.Fatalf("the row did not arrive; output:\n%s", p.output())
	}
	if string(got.Value) != `{"over":"mutual TLS"}` || got.Attrs.CompressionType() != 4 {
		t.Fatalf("record value %q, compression %d; want the payload, zstd (4)", got.Value, got.Attrs.CompressionType())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("outboxd exit %d:\n%s", code, p.output())
	}
	for name, text := range map[string]string{"logs": p.output(), "check output": checkOut} {
		if strings.Contains(text, "PRIVATE KEY") {
			t.Errorf("%s show a private key", name)
		}
	}
}
