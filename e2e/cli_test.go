package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runSplit runs the built binary to completion with env added to its environment and returns
// its exit code, stdout and stderr apart.
func runSplit(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("outboxd %v did not exit within 90s:\n%s\n%s", args, out.String(), errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// Every command's --help and -h, through the binary: the usage on stdout, exit 0; a bad flag:
// the usage on stderr, exit 2.
func TestHelpThroughTheBinary(t *testing.T) {
	for _, c := range [][]string{{"run"}, {"check"}, {"status"}, {"checkpoint", "show"}, {"checkpoint", "set"}, {"checkpoint"}, {"version"}} {
		for _, h := range []string{"--help", "-h"} {
			args := append(append([]string{}, c...), h)
			code, out, errOut := runSplit(t, nil, args...)
			if code != 0 || !strings.HasPrefix(out, "Usage: outboxd "+c[0]) || errOut != "" {
				t.Errorf("outboxd %v: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", args, code, out, errOut)
			}
		}
	}
	code, out, errOut := runSplit(t, nil, "run", "--bogus")
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "Usage: outboxd run ") || !strings.Contains(errOut, "-dead-letter-event") ||
		!strings.Contains(errOut, "outboxd: flag provided but not defined: -bogus") {
		t.Errorf("outboxd run --bogus: exit %d, stdout %q, stderr %q; want exit 2, the usage and the error on stderr", code, out, errOut)
	}
}

// checkJSON is the documented shape of `outboxd check --json`.
type checkJSON struct {
	OK       *bool       `json:"ok"`
	Problems []checkItem `json:"problems"`
	Warnings []checkItem `json:"warnings"`
	Verified []checkItem `json:"verified"`
}

type checkItem struct {
	Check   string `json:"check"`
	Subject string `json:"subject"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
	Skipped bool   `json:"skipped"`
}

func parseCheck(t *testing.T, out string) checkJSON {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var r checkJSON
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("check --json printed no JSON report: %v\n%s", err, out)
	}
	if r.OK == nil || r.Problems == nil || r.Warnings == nil || r.Verified == nil {
		t.Fatalf("check --json lacks ok, problems, warnings or verified (or one is null):\n%s", out)
	}
	return r
}

func hasItem(items []checkItem, check, subject string) *checkItem {
	for i := range items {
		if items[i].Check == check && items[i].Subject == subject {
			return &items[i]
		}
	}
	return nil
}

// `outboxd check --json` against real MariaDB and kfake, with the config from OUTBOXD_CONFIG: a
// good setup lists what it verified; a bad server setting, a missing table, a missing topic, a
// sink whose brokers are down and one that cannot open are each reported under their own name,
// while the good sink is still verified.
func TestCheckJSON(t *testing.T) {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	table := w.schema + ".outbox_event"

	o := simpleCfg(t, w, kc, "")
	o.Routes = "  - sink: main\n    topic: t\n"
	env := []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}
	code, out, errOut := runSplit(t, env, "check", "--json")
	r := parseCheck(t, out)
	if code != 0 || !*r.OK || len(r.Problems) != 0 {
		t.Fatalf("check --json of a good setup: exit %d, report %+v\nstderr:\n%s", code, r, errOut)
	}
	for _, want := range [][2]string{
		{"source", "source " + srv.Addr}, {"flavor", "source.flavor"}, {"log_bin", "log_bin"},
		{"binlog_format", "binlog_format"}, {"binlog_row_image", "binlog_row_image"},
		{"binlog_row_metadata", "binlog_row_metadata"}, {"server_id", "server_id"},
		{"replication_slave", "REPLICATION SLAVE"}, {"replication_client", "REPLICATION CLIENT"},
		{"table_exists", "table " + table}, {"table_select", "table " + table}, {"table_columns", "table " + table},
		{"sink", "sinks.main"}, {"topic", "sinks.main topic t"},
	} {
		if hasItem(r.Verified, want[0], want[1]) == nil {
			t.Errorf("verified lacks %s %q: %+v", want[0], want[1], r.Verified)
		}
	}
	// Without --json, the same as OK lines.
	code, out, _ = runSplit(t, env, "check")
	if code != 0 || !strings.Contains(out, "OK    source "+srv.Addr+": binlog_format is ROW [check binlog_format]") ||
		!strings.Contains(out, "OK    sinks.main topic t: is there") || !strings.Contains(out, "OK    source and sinks are ready for outboxd") {
		t.Fatalf("check: exit %d:\n%s", code, out)
	}

	// The broken setup.
	o.Tables = append(o.Tables, w.schema+".no_such_outbox")
	o.Sinks = map[string]string{
		"main":  kafkaSink(kc),
		"down":  `{type: kafka, brokers: ["127.0.0.1:1"], timeout: 2s}`,
		"small": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 100}", kc.ListenAddrs()[0]),
	}
	o.Routes = "  - {sink: main, topic: t, match: {topic: a}}\n  - {sink: main, topic: nosuch, match: {topic: b}}\n" +
		"  - {sink: down, topic: t, match: {topic: c}}\n  - {sink: small, topic: t}\n"
	env = []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}
	w.exec("SET GLOBAL binlog_format = 'STATEMENT'")
	defer w.exec("SET GLOBAL binlog_format = 'ROW'")
	code, out, errOut = runSplit(t, env, "check", "--json")
	r = parseCheck(t, out)
	if code != 1 || *r.OK {
		t.Fatalf("check --json of a broken setup: exit %d, report %+v\nstderr:\n%s", code, r, errOut)
	}
	for _, want := range [][2]string{
		{"binlog_format", "binlog_format"}, {"table_exists", "table " + w.schema + ".no_such_outbox"},
		{"topic", "sinks.main topic nosuch"}, {"sink", "sinks.down"}, {"sink", "sinks.small"},
	} {
		p := hasItem(r.Problems, want[0], want[1])
		if p == nil || p.Message == "" || p.Fix == "" {
			t.Errorf("problems lack %s %q with a message and a fix: %+v", want[0], want[1], r.Problems)
		}
	}
	if p := hasItem(r.Problems, "binlog_format", "binlog_format"); p != nil && (p.Message != "STATEMENT" || !strings.Contains(p.Fix, "ROW")) {
		t.Errorf("binlog_format problem %+v, want STATEMENT found and ROW in the fix", *p)
	}
	if p := hasItem(r.Problems, "sink", "sinks.small"); p != nil && !strings.Contains(p.Message, "max_message_bytes") {
		t.Errorf("sinks.small problem %+v, want the reason it cannot open", *p)
	}
	if len(r.Problems) != 5 {
		t.Errorf("want exactly the 5 problems, got %d: %+v", len(r.Problems), r.Problems)
	}
	// The good sink, its good topic and the good table are still checked and verified.
	for _, want := range [][2]string{{"sink", "sinks.main"}, {"topic", "sinks.main topic t"}, {"table_columns", "table " + table}} {
		if hasItem(r.Verified, want[0], want[1]) == nil {
			t.Errorf("verified lacks %s %q: %+v", want[0], want[1], r.Verified)
		}
	}
	if hasItem(r.Verified, "binlog_format", "binlog_format") != nil {
		t.Errorf("binlog_format is both a problem and verified: %+v", r.Verified)
	}
}
