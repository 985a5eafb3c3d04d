package config

import (
	"fmt"
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
		"bad mech":     {"SCRAM-SHA-512", "SCRAM-SHA-1", `"SCRAM-SHA-1" is not allowed; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`},
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

// clientCertYAML is secureYAML with client certificates on both TLS sections: the source's
// key given inline (from ${SRC_KEY}), the sink's from a file.
func clientCertYAML(t *testing.T) (y string, lookup func(string) (string, bool), dir string) {
	t.Helper()
	dir = writeSecrets(t)
	ca, err := testcert.New(filepath.Join(dir), "config test CA")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ca.Client("src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Client("kafka"); err != nil {
		t.Fatal(err)
	}
	y = strings.ReplaceAll(secureYAML, "DIR", dir)
	y = strings.Replace(y, "server_name: db.example}", "server_name: db.example, cert_file: "+src.CertFile+", key: \"${SRC_KEY}\"}", 1)
	y = strings.Replace(y, "tls: {ca_file: "+dir+"/ca.pem}", "tls: {ca_file: "+dir+"/ca.pem, cert_file: "+dir+"/kafka-cert.pem, key_file: "+dir+"/kafka-key.pem}", 1)
	env := map[string]string{"SRC_KEY": string(src.KeyPEM)}
	return y, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, dir
}

func TestClientCertificates(t *testing.T) {
	y, lookup, _ := clientCertYAML(t)
	c, err := parseFiles([]byte(y), lookup, readLimitedFile)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	tc, err := c.Source.TLS.ClientConfig("127.0.0.1")
	if err != nil || len(tc.Certificates) != 1 {
		t.Fatalf("source TLS = %+v, %v; want one client certificate", tc, err)
	}
	kc, err := c.Sinks["main"].TLS.ClientConfig()
	if err != nil || len(kc.Certificates) != 1 {
		t.Fatalf("kafka TLS = %+v, %v; want one client certificate", kc, err)
	}
	out := c.String() + c.Source.String() + fmt.Sprintf("%v %+v", *c, c.Source)
	if strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("the rendered config shows the private key:\n%s", out)
	}
	if !strings.Contains(out, "key: '***'") && !strings.Contains(out, `key: "***"`) && !strings.Contains(out, "key: ***") {
		t.Errorf("the rendered config should show *** for the inline key:\n%s", out)
	}
	if c.Source.TLS.Key == "" || !strings.Contains(c.Source.TLS.Key, "PRIVATE KEY") {
		t.Error("Redacted modified the original key")
	}
}

func TestClientCertificateProblems(t *testing.T) {
	y, lookup, dir := clientCertYAML(t)
	other, err := testcert.New(t.TempDir(), "other CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Client("stranger")
	if err != nil {
		t.Fatal(err)
	}
	kafkaKey := ", key_file: " + dir + "/kafka-key.pem}"
	cases := map[string]struct{ from, to, want string }{
		"cert without key":        {kafkaKey, "}", "sinks.main.tls.cert_file (line 15): needs its private key; set key_file (or key, from ${VAR}) too"},
		"key without cert":        {"cert_file: " + dir + "/kafka-cert.pem, ", "", "sinks.main.tls.key_file (line 15): needs its certificate; set cert_file"},
		"inline key without cert": {"cert_file: " + dir + "/src-cert.pem, ", "", "source.tls.key (line 8): needs its certificate"},
		"key and key_file":        {kafkaKey, ", key: x" + kafkaKey, "sinks.main.tls.key_file (line 15): set either key or key_file, not both"},
		"mismatched pair":         {kafkaKey, ", key_file: " + stranger.KeyFile + "}", "sinks.main.tls.key_file (line 15): is not the private key of " + dir + "/kafka-cert.pem (tls: private key does not match public key); give the PEM key that belongs to that certificate"},
		"unreadable key":          {kafkaKey, ", key_file: " + dir + "/nope.pem}", "sinks.main.tls.key_file (line 15): cannot read the key: open " + dir + "/nope.pem"},
		"unreadable cert":         {"cert_file: " + dir + "/kafka-cert.pem", "cert_file: " + dir + "/nope.pem", "sinks.main.tls.cert_file (line 15): cannot read the certificate"},
		"cert not pem":            {"cert_file: " + dir + "/kafka-cert.pem", "cert_file: " + dir + "/ak", "sinks.main.tls.cert_file (line 15): " + dir + "/ak holds no PEM certificate"},
		"disabled source":         {"mode: verify-identity, ca_file: " + dir + "/ca.pem, server_name: db.example", "mode: disabled", "source.tls.cert_file (line 8): is not used with mode disabled"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			y2 := strings.Replace(y, tc.from, tc.to, 1)
			if y2 == y {
				t.Fatalf("replacement %q not found", tc.from)
			}
			_, err := parseFiles([]byte(y2), lookup, readLimitedFile)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error shows a key: %v", err)
			}
		})
	}
}

func TestSASLMechanismProblems(t *testing.T) {
	dir := writeSecrets(t)
	base := strings.ReplaceAll(secureYAML, "DIR", dir)
	scram := "sasl: {mechanism: SCRAM-SHA-512, username: outboxd, password_file: " + dir + "/sasl-pw}"
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("eyJ.a.b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ to, want string }{
		"oauth ok":         {"sasl: {mechanism: OAUTHBEARER, token_file: " + token + "}", ""},
		"msk ok":           {"sasl: {mechanism: AWS_MSK_IAM, region: eu-west-1}", ""},
		"oauth no file":    {"sasl: {mechanism: OAUTHBEARER}", "sinks.main.sasl.token_file (line 16): is required with OAUTHBEARER"},
		"oauth user":       {"sasl: {mechanism: OAUTHBEARER, username: u, token_file: " + token + "}", "sinks.main.sasl.username (line 16): is not used with mechanism OAUTHBEARER; remove it"},
		"oauth missing":    {"sasl: {mechanism: OAUTHBEARER, token_file: " + dir + "/none}", "sinks.main.sasl.token_file (line 16): cannot read the token: open " + dir + "/none"},
		"oauth empty":      {"sasl: {mechanism: OAUTHBEARER, token_file: /dev/null}", "sinks.main.sasl.token_file (line 16): /dev/null is empty"},
		"msk password":     {"sasl: {mechanism: AWS_MSK_IAM, password_file: " + dir + "/sasl-pw}", "sinks.main.sasl.password_file (line 16): is not used with mechanism AWS_MSK_IAM"},
		"scram token":      {scram[:len(scram)-1] + ", token_file: " + token + "}", "sinks.main.sasl.token_file (line 16): is not used with mechanism SCRAM-SHA-512"},
		"compression bad":  {scram + "\n    compression: brotli", `sinks.main.compression (line 17): "brotli" is not allowed; use none, gzip, snappy, lz4 or zstd`},
		"compression zstd": {scram + "\n    compression: zstd", ""},
	} {
		t.Run(name, func(t *testing.T) {
			y := strings.Replace(base, scram, tc.to, 1)
			if y == base {
				t.Fatal("replacement not found")
			}
			_, err := parseFiles([]byte(y), noEnv, readLimitedFile)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestClientCertificateWithoutSecrets(t *testing.T) {
	// status and checkpoint show must load a config whose key variable is unset and whose
	// token file is gone: they connect nowhere.
	y, _, dir := clientCertYAML(t)
	y = strings.Replace(y, "sasl: {mechanism: SCRAM-SHA-512, username: outboxd, password_file: "+dir+"/sasl-pw}",
		"sasl: {mechanism: OAUTHBEARER, token_file: "+dir+"/gone}", 1)
	c, err := parseWith([]byte(y), noEnv, readLimitedFile, true)
	if err != nil {
		t.Fatalf("parse without secrets: %v", err)
	}
	if c.Source.TLS.Key != secretPlaceholder {
		t.Errorf("source.tls.key = %q, want the placeholder", c.Source.TLS.Key)
	}
}
