package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// unitFile reads a systemd unit into section -> key -> values (a key may repeat).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// The systemd unit restarts a failed (or superseded) outboxd, not a config error, gives the
// drain its time, and runs unprivileged; its ExecStart is the command the docs give.
func TestSystemdUnit(t *testing.T) {
	u := unitFile(t, filepath.Join(repoRoot(t), "deploy", "systemd", "outboxd.service"))
	svc := u["Service"]
	want := map[string]string{
		"Restart": "on-failure", "RestartPreventExitStatus": "2", "KillSignal": "SIGTERM",
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ExecStart": "/usr/local/bin/outboxd run --config /etc/outboxd/outboxd.yaml",
	}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %q, want %q", k, got, v)
		}
	}
	stop, err := time.ParseDuration(svc["TimeoutStopSec"][0])
	if err != nil || stop < 40*time.Second {
		t.Errorf("TimeoutStopSec %q: want at least 40s (the 30 s drain, then the save)", svc["TimeoutStopSec"])
	}
	if u["Install"]["WantedBy"][0] != "multi-user.target" {
		t.Errorf("WantedBy %q", u["Install"]["WantedBy"])
	}
	ha, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations", "ha.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ha), "deploy/systemd/outboxd.service") {
		t.Error("docs/operations/ha.md does not point at deploy/systemd/outboxd.service")
	}
}
