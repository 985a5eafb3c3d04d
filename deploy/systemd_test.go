package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/testenv/mariadb"
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
// drain its time, runs unprivileged, and hands the dynamic user its config and the password as
// credentials, so both can stay root-only in /etc/outboxd.
func TestSystemdUnit(t *testing.T) {
	u := unitFile(t, filepath.Join(repoRoot(t), "deploy", "systemd", "outboxd.service"))
	svc := u["Service"]
	want := map[string]string{
		"Restart": "on-failure", "RestartPreventExitStatus": "2", "KillSignal": "SIGTERM",
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ExecStart":        "/usr/local/bin/outboxd run --config %d/outboxd.yaml",
		"EnvironmentFile":  "-/etc/outboxd/outboxd.env",
		"StateDirectory":   "outboxd",
		"WorkingDirectory": "/var/lib/outboxd",
	}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %q, want %q", k, got, v)
		}
	}
	creds := []string{"outboxd.yaml:/etc/outboxd/outboxd.yaml", "mysql-password:/etc/outboxd/mysql-password"}
	if got := svc["LoadCredential"]; !slices.Equal(got, creds) {
		t.Errorf("[Service] LoadCredential = %q, want %q", got, creds)
	}
	stop, err := time.ParseDuration(svc["TimeoutStopSec"][0])
	if err != nil || stop < 40*time.Second {
		t.Errorf("TimeoutStopSec %q: want at least 40s (the 30 s drain, then the save)", svc["TimeoutStopSec"])
	}
	if u["Install"]["WantedBy"][0] != "multi-user.target" {
		t.Errorf("WantedBy %q", u["Install"]["WantedBy"])
	}
	doc := systemdDoc(t)
	if !strings.Contains(doc, "deploy/systemd/outboxd.service") {
		t.Error("docs/operations/systemd.md does not point at deploy/systemd/outboxd.service")
	}
	if !strings.Contains(doc, "password_file: "+credPasswordFile+"\n") {
		t.Errorf("docs/operations/systemd.md does not show the credential's password_file: %s", credPasswordFile)
	}
}

// credPasswordFile is the source.password_file the systemd doc tells users to write: the
// service's credential under the unit, the root-only file from a root shell.
const credPasswordFile = "${CREDENTIALS_DIRECTORY:-/etc/outboxd}/mysql-password"

func systemdDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations", "systemd.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// requireTool finds a command on $PATH; without it the test fails under $CI (CI installs it:
// scripts/install-deps.sh) and is skipped elsewhere with how to get it.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (apt-get install -y %s; scripts/install-deps.sh does)", name, pkg)
		}
		t.Skipf("%s not found: apt-get install -y %s", name, pkg)
	}
	return p
}

// systemd-analyze verify parses the unit as systemd would: unknown keys, bad specifiers and
// values are reported (some only as warnings, so any output fails the test). The unit names
// /usr/local/bin/outboxd, which verify wants to exist; a copy points at a stand-in instead.
func TestSystemdAnalyzeVerify(t *testing.T) {
	tool := requireTool(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	stub := filepath.Join(dir, "outboxd")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "systemd", "outboxd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/outboxd ")) {
		t.Fatal("ExecStart does not run /usr/local/bin/outboxd")
	}
	unit = bytes.ReplaceAll(unit, []byte("ExecStart=/usr/local/bin/outboxd "), []byte("ExecStart="+stub+" "))
	path := filepath.Join(dir, "outboxd.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, "verify", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// installCommands is the first sh block of the systemd doc's "## Install" section: the commands
// TestSystemdInstallAndStart runs, so the doc and the test cannot drift.
func installCommands(t *testing.T) [][]string {
	t.Helper()
	doc := systemdDoc(t)
	_, sec, ok := strings.Cut(doc, "\n## Install\n")
	if !ok {
		t.Fatal("docs/operations/systemd.md has no \"## Install\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "\n```sh\n")
	if !ok {
		t.Fatal("the Install section has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "\n```")
	var cmds [][]string
	for _, l := range strings.Split(block, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			cmds = append(cmds, f)
		}
	}
	return cmds
}

// serviceUser is the unprivileged account the test runs outboxd as, standing in for the unit's
// dynamic user; created (and removed afterwards) when it does not exist.
const serviceUser = "outboxd-unit-test"

func unprivilegedUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the systemd install test runs as root (to install into a root-owned tree and switch to an unprivileged user); CI runs as root")
		}
		t.Skip("needs root: it installs root-owned files and starts outboxd as an unprivileged user")
	}
	u, err := user.Lookup(serviceUser)
	if err != nil {
		add := requireTool(t, "useradd", "passwd")
		if out, err := exec.Command(add, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", serviceUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("userdel", serviceUser).Run() })
		if u, err = user.Lookup(serviceUser); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := strconv.ParseUint(u.Uid, 10, 32)
	g, _ := strconv.ParseUint(u.Gid, 10, 32)
	if id == 0 {
		t.Fatalf("%s is uid 0", serviceUser)
	}
	return uint32(id), uint32(g)
}

// Installs the binary, the unit, a config and the password into a temporary root with the
// commands of docs/operations/systemd.md, then starts outboxd as the unit would: as an
// unprivileged user that cannot read /etc/outboxd, with the credentials copied into its own
// $CREDENTIALS_DIRECTORY, in the state directory, with ExecStart's command line. It must pass
// its start-up checks against a real MariaDB (with a password), answer /readyz and relay a row
// to Kafka (kfake).
func TestSystemdInstallAndStart(t *testing.T) {
	mariadb.RequireT(t)
	uid, gid := unprivilegedUser(t)
	srv, rootDB := mariadb.RootT(t, mariadb.Options{}, "CREATE DATABASE shop", `CREATE TABLE shop.outbox_event (
  id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL, biz_key VARCHAR(64) NOT NULL,
  topic VARCHAR(128) NOT NULL, event_type VARCHAR(64) NULL, payload JSON NOT NULL, headers JSON NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`)
	pw := mariadb.CreateUserT(t, rootDB, "outboxd",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s", "GRANT SELECT ON shop.outbox_event TO %s")
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kafka.Close)

	// Both trees must be traversable by the service user (t.TempDir's parents are 0700).
	base, err := os.MkdirTemp("", "outboxd-systemd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	stage, root := filepath.Join(base, "stage"), filepath.Join(base, "root")
	for _, d := range []string{stage, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(stage, "outboxd"), "./cmd/outboxd")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "systemd", "outboxd.service"))
	if err != nil {
		t.Fatal(err)
	}
	admin := freeAddr(t)
	cfg := fmt.Sprintf(`source:
  flavor: mariadb
  addr: %s
  user: outboxd
  password_file: %s
  server_id: 4242
  start: latest
tables:
  - table: shop.outbox_event
sinks:
  kafka: {type: kafka, brokers: [%q]}
routes:
  - sink: kafka
    topic: "{topic}"
checkpoint:
  path: %s
admin:
  listen: %q
log:
  format: json
`, srv.Addr, credPasswordFile, kafka.ListenAddrs()[0], filepath.Join(root, "var/lib/outboxd/checkpoint.json"), admin)
	for name, data := range map[string]string{"outboxd.service": string(unit), "outboxd.yaml": cfg, "mysql-password": pw + "\n"} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The directories any systemd distribution has; the doc creates the rest.
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "run", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The doc's commands, with every absolute path moved under root; systemctl is what the rest
	// of this test does by hand.
	ran := 0
	for _, c := range installCommands(t) {
		switch {
		case c[0] == "install":
			args := slices.Clone(c[1:])
			for i, a := range args {
				if strings.HasPrefix(a, "/") {
					args[i] = filepath.Join(root, a)
				}
			}
			cmd := exec.Command("install", args...)
			cmd.Dir = stage
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
			}
			ran++
		case c[0] == "systemctl" && (slices.Equal(c, []string{"systemctl", "daemon-reload"}) || slices.Equal(c, []string{"systemctl", "enable", "--now", "outboxd"})):
		default:
			t.Fatalf("the Install block has a command this test does not know how to run: %s", strings.Join(c, " "))
		}
	}
	if ran == 0 {
		t.Fatal("the Install block installs nothing")
	}
	// The config and the password stay root-only: the service user reads them only as credentials.
	for _, f := range []string{"etc/outboxd/outboxd.yaml", "etc/outboxd/mysql-password"} {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("/%s is mode %v: want no access for group and others", f, st.Mode().Perm())
		}
	}

	// What systemd does for the installed unit before ExecStart.
	u := unitFile(t, filepath.Join(root, "etc/systemd/system/outboxd.service"))
	svc := u["Service"]
	if got := svc["DynamicUser"]; !slices.Equal(got, []string{"yes"}) {
		t.Fatalf("DynamicUser %q: this test stands in for a dynamic user", got)
	}
	credDir := filepath.Join(root, "run/credentials/outboxd.service")
	if err := os.MkdirAll(filepath.Dir(credDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(credDir, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, lc := range svc["LoadCredential"] {
		id, src, ok := strings.Cut(lc, ":")
		if !ok {
			t.Fatalf("LoadCredential=%s: want ID:PATH", lc)
		}
		data, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatalf("LoadCredential=%s: %v (the Install block must install it)", lc, err)
		}
		dst := filepath.Join(credDir, id)
		if err := os.WriteFile(dst, data, 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dst, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(credDir, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(root, "var/lib", svc["StateDirectory"][0])
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CREDENTIALS_DIRECTORY=" + credDir}
	for _, ef := range svc["EnvironmentFile"] {
		optional := strings.HasPrefix(ef, "-")
		data, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(ef, "-")))
		if err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			t.Fatalf("EnvironmentFile=%s: %v", ef, err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				env = append(env, l)
			}
		}
	}
	argv := strings.Fields(strings.ReplaceAll(svc["ExecStart"][0], "%d", credDir))
	for i, a := range argv {
		if strings.HasPrefix(a, "/") && !strings.HasPrefix(a, root+"/") {
			argv[i] = filepath.Join(root, a)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = filepath.Join(root, svc["WorkingDirectory"][0])
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("outboxd exited: %v\n%s", waitErr, out.String())
		default:
		}
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 60 s; output:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	mariadb.ExecT(t, rootDB, `INSERT INTO shop.outbox_event (event_id, biz_key, topic, payload) VALUES ('e-1', 'order-1', 'orders', '{"id": 1}')`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	if len(got) != 1 || string(got[0].Key) != "order-1" {
		t.Fatalf("want the one row relayed with key order-1, got %d records; output:\n%s", len(got), out.String())
	}
}

// freeAddr is a 127.0.0.1 address with a port nothing listens on at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
