package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testcert"
)

const secureYAML = `
source:
  flavor: mariadb
  addr: 127.0.0.1:3306
  user: outboxd
  password_file: DIR/mysql-pw
  server_id: 4242
  tls: {mode: verify-identity, ca_file: DIR/ca.pem, server_name: db.example}
tables:
  - table: shop.outbox_event
sinks:
  main:
    type: kafka
    brokers: ["127.0.0.1:9093"]
    tls: {ca_file: DIR/ca.pem}
    sasl: {mechanism: SCRAM-SHA-512, username: outboxd, password_file: DIR/sasl-pw}
  mq:
    type: rocketmq
    nameservers: ["127.0.0.1:9876"]
    access_key_file: DIR/ak
    secret_key_file: DIR/sk
routes:
  - sink: main
`

func writeSecrets(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := testcert.New(dir, "config test CA"); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"mysql-pw": "my-sql-pw\n", "sasl-pw": "sasl-pw-9\r\n", "ak": "AK1", "sk": "SK1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSecretFilesAndTLS(t *testing.T) {
	dir := writeSecrets(t)
	path := filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(secureYAML, "DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.Source.Password != "my-sql-pw" {
		t.Errorf("source.password = %q, want the file's content without the newline", c.Source.Password)
	}
	if got := c.Sinks["main"].SASL.Password; got != "sasl-pw-9" {
		t.Errorf("sasl.password = %q", got)
	}
	if mq := c.Sinks["mq"]; mq.AccessKey != "AK1" || mq.SecretKey != "SK1" {
		t.Errorf("rocketmq keys = %q %q", mq.AccessKey, mq.SecretKey)
	}
	tc, err := c.Source.TLS.ClientConfig("127.0.0.1")
	if err != nil || tc == nil || tc.RootCAs == nil || tc.ServerName != "db.example" || tc.InsecureSkipVerify {
		t.Fatalf("source TLS = %+v, %v; want a verifying config for db.example", tc, err)
	}
	kc, err := c.Sinks["main"].TLS.ClientConfig()
	if err != nil || kc == nil || kc.RootCAs == nil {
		t.Fatalf("kafka TLS = %+v, %v", kc, err)
	}
	out := c.String() + c.Source.String() + c.Sinks["main"].String()
	for _, secret := range []string{"my-sql-pw", "sasl-pw-9", "AK1", "SK1"} {
		if strings.Contains(out, secret) {
			t.Errorf("String() shows secret %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "password_file") || !strings.Contains(out, "***") {
		t.Errorf("String() should show the file paths and *** for values:\n%s", out)
	}
	// The redacted copy must not share the SASL section with the original.
	if c.Sinks["main"].SASL.Password != "sasl-pw-9" {
		t.Error("Redacted modified the original")
	}
}

func TestSecretFileProblems(t *testing.T) {
	dir := writeSecrets(t)
	base := strings.ReplaceAll(secureYAML, "DIR", dir)
	cases := map[string]struct{ from, to, want string }{
		"both":         {"password_file: " + dir + "/mysql-pw", "password: x\n  password_file: " + dir + "/mysql-pw", "source.password_file (line 7): set either password or password_file, not both"},
		"missing file": {dir + "/sasl-pw", dir + "/nope", "sinks.main.sasl.password_file"},
		"bad mode":     {"mode: verify-identity", "mode: verify-full", `source.tls.mode (line 8): "verify-full" is not allowed`},
		"bad mech":     {"SCRAM-SHA-512", "SCRAM-SHA-1", `"SCRAM-SHA-1" is not allowed; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`},
		"no password":  {", password_file: " + dir + "/sasl-pw", "", "sinks.main.sasl.password (line"},
		"ca not pem":   {"ca_file: " + dir + "/ca.pem, server_name", "ca_file: " + dir + "/ak, server_name", "holds no PEM certificate"},
		"tls on mq":    {"access_key_file", "tls: {}\n    access_key_file", "sinks.mq.tls (line"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			y := strings.Replace(base, tc.from, tc.to, 1)
			if y == base {
				t.Fatalf("replacement %q not found", tc.from)
			}
			_, err := parseFiles([]byte(y), noEnv, readLimitedFile)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "my-sql-pw") || strings.Contains(err.Error(), "sasl-pw-9") {
				t.Fatalf("error shows a secret: %v", err)
			}
		})
	}
}

func TestSecretFileNotReadInTests(t *testing.T) {
	// parse (used by the fuzzer) must never touch the file system.
	y := strings.Replace(minimal, "user: outboxd", "user: outboxd\n  password_file: /dev/zero", 1)
	if _, err := parse([]byte(y), noEnv); err == nil || !strings.Contains(err.Error(), "file access disabled") {
		t.Fatalf("parse read a file: %v", err)
	}
}
