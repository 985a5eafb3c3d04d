package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSkipChecksAndMinimalMetadata(t *testing.T) {
	y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  skip_checks: [replication_client, table_select]\n  allow_minimal_row_metadata: true", 1)
	c, err := parse([]byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Source.SkipChecks, []string{"replication_client", "table_select"}) || !c.Source.AllowMinimalRowMetadata {
		t.Fatalf("source = %+v", c.Source)
	}
	if r := c.Redacted(); !slices.Equal(r.Source.SkipChecks, c.Source.SkipChecks) {
		t.Errorf("Redacted lost skip_checks: %v", r.Source.SkipChecks)
	}

	bad := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  skip_checks: [replication_slave, grants, replication_slave]", 1)
	got := mustFail(t, bad, noEnv)
	wantContains(t, got, `source.skip_checks[1] (line 7): "grants" is not a check name; use one of flavor, log_bin,`,
		"table_columns", `source.skip_checks[2] (line 7): "replication_slave" is listed twice`)
}

// The read-only commands load a config whose secrets they cannot read: unset variables and
// missing secret files are no error, and every other field still is checked.
func TestLoadWithoutSecrets(t *testing.T) {
	dir := t.TempDir()
	y := strings.Replace(minimal, "user: outboxd", "user: outboxd\n  password: ${OUTBOXD_TEST_UNSET_PW}", 1)
	y = strings.Replace(y, `main: {type: kafka, brokers: ["127.0.0.1:9092"]}`,
		`main: {type: kafka, brokers: ["127.0.0.1:9092"], sasl: {mechanism: PLAIN, username: u, password_file: `+dir+`/nope}, tls: {ca_file: `+dir+`/noca.pem}}`, 1)
	y += "checkpoint:\n  path: ${OUTBOXD_TEST_DIR}/cp.json\n"
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTBOXD_TEST_DIR", dir)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "OUTBOXD_TEST_UNSET_PW") {
		t.Fatalf("Load: %v, want the unset variable named", err)
	}
	c, err := LoadWithoutSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Checkpoint.Path != dir+"/cp.json" {
		t.Errorf("checkpoint.path = %q: non-secret variables must still expand", c.Checkpoint.Path)
	}
	if c.Source.Password != secretPlaceholder || c.Sinks["main"].SASL.Password != secretPlaceholder {
		t.Errorf("secrets = %q, %q, want the placeholder", c.Source.Password, c.Sinks["main"].SASL.Password)
	}
	// A variable outside the secrets must still be set.
	t.Setenv("OUTBOXD_TEST_DIR", "")
	os.Unsetenv("OUTBOXD_TEST_DIR")
	if _, err := LoadWithoutSecrets(path); err == nil || !strings.Contains(err.Error(), "OUTBOXD_TEST_DIR") {
		t.Errorf("LoadWithoutSecrets with checkpoint.path's variable unset: %v", err)
	}
	for path, want := range map[string]bool{
		"source.password": true, "sinks.a.access_key": true, "sinks.a.secret_key": true, "sinks.a.sasl.password": true,
		"source.user": false, "sinks.a.sasl.username": false, "sinks.a.b.access_key": false, "tables[0].table": false,
	} {
		if got := isSecretField(path); got != want {
			t.Errorf("isSecretField(%q) = %v", path, got)
		}
	}
}
