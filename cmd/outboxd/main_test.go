package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/binlog"
)

// helpArgs are every command's help requests and the synopsis each must print.
var helpArgs = []struct {
	args     []string
	synopsis string
}{
	{[]string{"run"}, "Usage: outboxd run "},
	{[]string{"check"}, "Usage: outboxd check "},
	{[]string{"status"}, "Usage: outboxd status "},
	{[]string{"checkpoint", "show"}, "Usage: outboxd checkpoint show "},
	{[]string{"checkpoint", "set"}, "Usage: outboxd checkpoint set "},
	{[]string{"checkpoint", "import"}, "Usage: outboxd checkpoint import "},
	{[]string{"checkpoint"}, "Usage: outboxd checkpoint show "},
	{[]string{"backfill"}, "Usage: outboxd backfill "},
	{[]string{"reconcile"}, "Usage: outboxd reconcile "},
	{[]string{"version"}, "Usage: outboxd version"},
}

func run(args ...string) (err error, stdout, stderr string) {
	var out, errb bytes.Buffer
	err = dispatch(context.Background(), nil, args, &out, &errb)
	return err, out.String(), errb.String()
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// --help, -h and "help CMD" print the command's usage to stdout, nothing to stderr, exit 0.
func TestHelpOfEveryCommand(t *testing.T) {
	for _, h := range helpArgs {
		for _, flag := range []string{"--help", "-h", "-help"} {
			args := append(append([]string{}, h.args...), flag)
			err, out, errOut := run(args...)
			if err != nil || !strings.HasPrefix(out, h.synopsis) || errOut != "" {
				t.Errorf("%v: exit %d (%v), stdout %q, stderr %q; want exit 0 and %q on stdout only", args, exitCode(err), err, out, errOut, h.synopsis)
			}
		}
		args := append([]string{"help"}, h.args...)
		if err, out, errOut := run(args...); err != nil || !strings.HasPrefix(out, h.synopsis) || errOut != "" {
			t.Errorf("%v: exit %d (%v), stdout %q, stderr %q", args, exitCode(err), err, out, errOut)
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		if err, out, errOut := run(args...); err != nil || !strings.HasPrefix(out, "outboxd relays") || errOut != "" {
			t.Errorf("%v: exit %d (%v), stdout %q, stderr %q", args, exitCode(err), err, out, errOut)
		}
	}
}

// A bad flag, a stray argument or a missing subcommand exits 2 with the usage on stderr.
func TestFlagErrorsExit2WithUsageOnStderr(t *testing.T) {
	cases := []struct {
		args     []string
		synopsis string
	}{
		{[]string{"run", "--bogus"}, "Usage: outboxd run "},
		{[]string{"check", "stray"}, "Usage: outboxd check "},
		{[]string{"status", "--json=maybe"}, "Usage: outboxd status "},
		{[]string{"checkpoint", "show", "-x"}, "Usage: outboxd checkpoint show "},
		{[]string{"checkpoint", "set", "--gtid"}, "Usage: outboxd checkpoint set "},
		{[]string{"checkpoint"}, "Usage: outboxd checkpoint show "},
		{[]string{"checkpoint", "drop"}, "Usage: outboxd checkpoint show "},
		{[]string{"version", "--bogus"}, "Usage: outboxd version"},
		{[]string{"nosuch"}, "outboxd relays"},
		{nil, "outboxd relays"},
	}
	for _, c := range cases {
		err, out, errOut := run(c.args...)
		if exitCode(err) != 2 || out != "" || !strings.HasPrefix(errOut, c.synopsis) {
			t.Errorf("%v: exit %d (%v), stdout %q, stderr %q; want exit 2 and %q on stderr", c.args, exitCode(err), err, out, errOut, c.synopsis)
		}
	}
}

// The top-level usage names every flag of every command, and each command's usage lists its own.
func TestUsageNamesEveryFlag(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, h := range helpArgs {
		_, out, _ := run(append(append([]string{}, h.args...), "--help")...)
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			if !strings.Contains(usage, "--"+m[1]) {
				t.Errorf("the usage lacks --%s of %v", m[1], h.args)
			}
		}
	}
	_, out, _ := run("run", "--help")
	for _, f := range []string{"-config", "-from-gtid", "-force", "-dead-letter-event"} {
		if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
			t.Errorf("run --help lacks %s:\n%s", f, out)
		}
	}
	if !strings.Contains(usage, "OUTBOXD_CONFIG") {
		t.Error("the usage does not name OUTBOXD_CONFIG")
	}
	for _, h := range helpArgs {
		_, out, _ := run(append(append([]string{}, h.args...), "--help")...)
		if strings.Contains(out, "-config") && !strings.Contains(out, "$OUTBOXD_CONFIG") {
			t.Errorf("%v --help does not say that $OUTBOXD_CONFIG is --config's default:\n%s", h.args, out)
		}
	}
}

// writeConfig writes a config whose checkpoint lives at dir/checkpoint.json and whose admin
// address has nothing listening.
func writeConfig(t *testing.T, dir string) string {
	t.Helper()
	text := `source: {flavor: mariadb, addr: "127.0.0.1:1", user: u, password: "", server_id: 7}
tables: [{table: shop.outbox_event}]
sinks: {main: {type: kafka, brokers: ["127.0.0.1:1"]}}
routes: [{sink: main}]
checkpoint: {path: "` + filepath.Join(dir, "checkpoint.json") + `"}
admin: {listen: "127.0.0.1:1"}
`
	path := filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// $OUTBOXD_CONFIG is the config without --config; --config wins over it; --addr wins over it
// for status.
func TestConfigFromEnvironment(t *testing.T) {
	envDir, flagDir := t.TempDir(), t.TempDir()
	t.Setenv(configEnv, writeConfig(t, envDir))
	flagCfg := writeConfig(t, flagDir)

	err, _, _ := run("checkpoint", "show")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), filepath.Join(envDir, "checkpoint.json")) {
		t.Fatalf("checkpoint show with %s set: %v, want exit 1 naming the env config's checkpoint", configEnv, err)
	}
	err, _, _ = run("checkpoint", "show", "--config", flagCfg)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), filepath.Join(flagDir, "checkpoint.json")) {
		t.Fatalf("checkpoint show --config: %v, want the flag's config's checkpoint", err)
	}
	// status: --addr with the variable set is not "both"; it asks that address.
	err, _, _ = run("status", "--addr", "127.0.0.1:1")
	if exitCode(err) != 1 || strings.Contains(err.Error(), "not both") {
		t.Fatalf("status --addr with %s set: exit %d (%v), want the fetch from --addr to fail (exit 1)", configEnv, exitCode(err), err)
	}
	// status without --addr uses the variable's config (admin.listen is on by default).
	err, _, _ = run("status")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("status with %s set: exit %d (%v), want 1 naming the config's admin.listen (nothing listens)", configEnv, exitCode(err), err)
	}
	if err, _, _ = run("status", "--addr", "127.0.0.1:1", "--config", flagCfg); exitCode(err) != 2 {
		t.Fatalf("status --addr --config: exit %d (%v), want 2", exitCode(err), err)
	}

	t.Setenv(configEnv, filepath.Join(envDir, "missing.yaml"))
	if err, _, _ = run("checkpoint", "show", "--config", flagCfg); exitCode(err) != 1 {
		t.Fatalf("--config did not win over a %s naming no file: %v", configEnv, err)
	}
	if err, _, _ = run("checkpoint", "show"); exitCode(err) != 2 || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("checkpoint show with %s naming no file: exit %d (%v), want 2 naming it", configEnv, exitCode(err), err)
	}

	t.Setenv(configEnv, "")
	if err, _, _ = run("check"); exitCode(err) != 2 || !strings.Contains(err.Error(), configEnv) {
		t.Fatalf("check without config: exit %d (%v), want 2 naming %s", exitCode(err), err, configEnv)
	}
}

// cliGuide is the page whose Synopsis lists every command with its flags.
const cliGuide = "../../docs/reference/cli-guide.md"

// The commands guide's synopsis names every flag of every command, as the usage does.
func TestDocsSynopsisNamesEveryFlag(t *testing.T) {
	b, err := os.ReadFile(cliGuide)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, "\n## Synopsis\n")
	if i < 0 {
		t.Fatalf("%s has no Synopsis section", cliGuide)
	}
	block := page[i:]
	start := strings.Index(block, "```sh\n")
	end := strings.Index(block[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("%s's Synopsis section has no sh block", cliGuide)
	}
	synopsis := block[start+6 : start+6+end]
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, h := range helpArgs {
		_, out, _ := run(append(append([]string{}, h.args...), "--help")...)
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			var line string
			for _, l := range strings.Split(synopsis, "\n") {
				if strings.HasPrefix(l, "outboxd "+strings.Join(h.args, " ")+" ") {
					line = l
				}
			}
			if len(h.args) == 1 && h.args[0] == "checkpoint" {
				continue // its subcommands have their lines
			}
			if !strings.Contains(line, "--"+m[1]) {
				t.Errorf("%s: the synopsis line for %v lacks --%s: %q", cliGuide, h.args, m[1], line)
			}
		}
	}
}

// A stop error's fix reaches the user on a line of its own, also when the error was logged
// already; the exit code is the exitError's, else 1.
func TestReportPrintsTheFixOnItsOwnLine(t *testing.T) {
	stop := &binlog.StopError{Table: "shop.outbox", Problem: "transaction 0-1-5 is unreadable", Fix: "Set binlog_format=ROW"}
	cases := []struct {
		err   error
		code  int
		lines []string
	}{
		{fmt.Errorf("%w: %w", errReported, stop), 1, []string{"outboxd: fix: Set binlog_format=ROW"}},
		{stop, 1, []string{"outboxd: outbox table shop.outbox: transaction 0-1-5 is unreadable", "outboxd: fix: Set binlog_format=ROW"}},
		{&exitError{code: 2, err: errors.New("bad flag")}, 2, []string{"outboxd: bad flag"}},
	}
	for _, c := range cases {
		var w bytes.Buffer
		code := report(&w, c.err)
		if got := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n"); code != c.code || !slices.Equal(got, c.lines) {
			t.Errorf("report(%v) = %d, %q; want %d, %q", c.err, code, got, c.code, c.lines)
		}
	}
}

// version prints the version and commit stamped with -ldflags (make release checks the real
// stamping in internal/release's test).
func TestVersionPrintsStampedCommit(t *testing.T) {
	oldVersion, oldCommit := version, commit
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
	version, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	err, stdout, _ := run("version")
	if err != nil || !strings.HasPrefix(stdout, "outboxd v1.2.3 (commit 0123456789abcdef0123456789abcdef01234567, go") {
		t.Errorf("outboxd version: %q, %v; want the version, then the commit", stdout, err)
	}
}
