package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// writeYAML writes a config text to dir/name and returns its path.
func writeYAML(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantRefusal runs `outboxd run` and `outboxd check` on cfgPath and wants both to fail with
// every want in the output (run: in its one error), and none of unwanted.
func wantRefusal(t *testing.T, cfgPath string, wants []string, unwanted ...string) {
	t.Helper()
	code, out := runBinary(t, "run", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "the source server is not set up for outboxd") {
		t.Fatalf("run exited %d, want 1 with the preflight error:\n%s", code, out)
	}
	ccode, cout := runBinary(t, "check", "--config", cfgPath)
	if ccode != 1 {
		t.Fatalf("check exited %d, want 1:\n%s", ccode, cout)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("run output lacks %q:\n%s", w, out)
		}
		if !strings.Contains(cout, w) {
			t.Errorf("check output lacks %q:\n%s", w, cout)
		}
	}
	for _, u := range unwanted {
		if strings.Contains(out, u) || strings.Contains(cout, u) {
			t.Errorf("output has %q:\nrun:\n%s\ncheck:\n%s", u, out, cout)
		}
	}
	if strings.Contains(out, `"message":"starting"`) {
		t.Errorf("run got as far as starting:\n%s", out)
	}
}

// MariaDB's default binlog_format MIXED logs plain INSERTs as statements, which outboxd cannot
// see: run refuses with check's text, MINIMAL metadata in the same error; the overrides work and
// are logged.
func TestRunRefusesMixedFormatAndMinimalMetadata(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{BinlogFormat: "MIXED", RowMetadata: "MINIMAL"})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	o.Extra = "admin: {listen: \"off\"}\n" // the run below starts; keep off the default port
	cfgPath := writeCfg(t, o)
	wantRefusal(t, cfgPath, []string{
		"2 problem(s)",
		"binlog_format is MIXED: SET GLOBAL binlog_format = 'ROW'",
		"binlog_row_metadata is MINIMAL: SET GLOBAL binlog_row_metadata = 'FULL'",
		"source.allow_minimal_row_metadata: true) [check binlog_row_metadata]",
		"survives a restart (connected sessions keep the old value until they reconnect) [check binlog_format]",
	})

	// Accepting MINIMAL leaves the format; check names the metadata as a warning.
	o.Source = "  allow_minimal_row_metadata: true\n"
	cfgPath = writeCfg(t, o)
	wantRefusal(t, cfgPath, []string{"1 problem(s)", "binlog_format is MIXED"}, "FAIL  source "+srv.Addr+": binlog_row_metadata")
	if _, out := runBinary(t, "check", "--config", cfgPath); !strings.Contains(out, "WARN  source "+srv.Addr+": binlog_row_metadata is MINIMAL") {
		t.Errorf("check does not warn about MINIMAL:\n%s", out)
	}

	// skip_checks: run starts, naming the skipped check and what it found.
	o.Source += "  skip_checks: [binlog_format]\n"
	cfgPath = writeCfg(t, o)
	p := startBinary(t, "run", "--config", cfgPath)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.output(), `"message":"starting"`) {
		if time.Now().After(deadline) {
			t.Fatalf("run with skip_checks did not start:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := p.output()
	for _, want := range []string{
		`"check":"binlog_format"`,
		`"message":"source.skip_checks: this start-up check is skipped`,
		"binlog_format is MIXED: SET GLOBAL binlog_format = 'ROW'",
		"[check binlog_format, skipped by source.skip_checks]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("run log lacks %q:\n%s", want, out)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 30*time.Second)
	if _, out := runBinary(t, "check", "--config", cfgPath); !strings.Contains(out, "WARN  source "+srv.Addr+": binlog_format is MIXED") ||
		!strings.Contains(out, "skipped by source.skip_checks") {
		t.Errorf("check does not report the skipped check:\n%s", out)
	}

	// A misspelled check name is a config error listing the valid ones.
	o.Source = "  skip_checks: [binlog_fromat]\n"
	code, out := runBinary(t, "run", "--config", writeCfg(t, o))
	if code != 2 || !strings.Contains(out, `"binlog_fromat" is not a check name; use one of flavor, log_bin, binlog_format`) {
		t.Errorf("run with an unknown check name exited %d:\n%s", code, out)
	}
}

// A missing required column and a misspelled table stop run before it streams, with the
// fix (ALTER TABLE or the config key; the table name before a GRANT that would fail).
func TestRunRefusesMissingColumnAndTable(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")

	t.Run("missing column", func(t *testing.T) {
		w.exec("ALTER TABLE " + w.schema + ".outbox_event DROP COLUMN topic")
		defer w.exec("ALTER TABLE " + w.schema + ".outbox_event ADD COLUMN topic VARCHAR(128) NULL AFTER biz_key")
		o := simpleCfg(t, w, kc, "")
		wantRefusal(t, writeCfg(t, o), []string{
			"column " + w.schema + ".outbox_event.topic is missing (configured as tables[0].columns.topic",
			"ALTER TABLE `" + w.schema + "`.`outbox_event` ADD COLUMN `topic` VARCHAR(128) NOT NULL; or set tables[0].columns.topic",
		})
	})

	t.Run("misspelled table", func(t *testing.T) {
		user := "tbl_" + w.schema
		w.exec("CREATE USER '" + user + "'@'127.0.0.1' IDENTIFIED BY 'pw'")
		w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'127.0.0.1'")
		w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO '" + user + "'@'127.0.0.1'")
		t.Cleanup(func() { w.exec("DROP USER '" + user + "'@'127.0.0.1'") })
		o := simpleCfg(t, w, kc, "")
		o.Tables = []string{w.schema + ".nope"}
		o.User, o.Pass = user, "pw"
		wantRefusal(t, writeCfg(t, o), []string{
			"table " + w.schema + ".nope is missing or not visible",
			"check the table name first (tables[0].table; the tables of `" + w.schema + "` the account can see: outbox_event)",
		})
		// As root, who sees everything, the table is plainly missing.
		o.User, o.Pass = "", ""
		wantRefusal(t, writeCfg(t, o), []string{"table " + w.schema + ".nope is missing (Table '" + w.schema + ".nope' doesn't exist)",
			"check the table name (tables[0].table"}, "GRANT SELECT ON `"+w.schema+"`.`nope`")
	})

	t.Run("missing privilege", func(t *testing.T) {
		user := "nosl_" + w.schema
		w.exec("CREATE USER '" + user + "'@'127.0.0.1' IDENTIFIED BY 'pw'")
		w.exec("GRANT BINLOG MONITOR ON *.* TO '" + user + "'@'127.0.0.1'")
		w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO '" + user + "'@'127.0.0.1'")
		t.Cleanup(func() { w.exec("DROP USER '" + user + "'@'127.0.0.1'") })
		o := simpleCfg(t, w, kc, "")
		o.User, o.Pass = user, "pw"
		wantRefusal(t, writeCfg(t, o), []string{"1 problem(s)", "REPLICATION SLAVE is not granted to '" + user + "'@'127.0.0.1'",
			"GRANT REPLICATION SLAVE ON *.* TO '" + user + "'@'127.0.0.1';"})
	})

	t.Run("flavor mysql against MariaDB", func(t *testing.T) {
		o := simpleCfg(t, w, kc, "")
		path := writeYAML(t, o.Dir, "mysql.yaml", strings.Replace(o.yaml(), "flavor: mariadb", "flavor: mysql", 1))
		wantRefusal(t, path, []string{"1 problem(s)", "this server is MariaDB: set source.flavor: mariadb"}, "gtid_mode", "GRANT")
	})
}

// log_bin off: run gives check's fix, not a GTID position error.
func TestRunRefusesLogBinOff(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{"--skip-log-bin"}})
	w := newWorld(t, srv)
	var logBin int
	if err := w.db.QueryRow("SELECT @@log_bin").Scan(&logBin); err != nil || logBin != 0 {
		t.Fatalf("@@log_bin = %d, %v; want 0", logBin, err)
	}
	o := simpleCfg(t, w, kafkaCluster(t, "t"), "")
	wantRefusal(t, writeCfg(t, o), []string{"log_bin is OFF: add log_bin = mysql-bin"}, "ahead of the server", "--from-gtid")
}

// A server restarted with binlog_format=STATEMENT while outboxd runs: the reconnect re-runs
// the preflight and outboxd stops with check's error; the checkpoint stays where it was.
func TestReconnectReverifiesServer(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	r := startRelay(t, o, daemon.Options{})
	g := w.commit(row{EventID: "e1", Key: "k", Topic: "t", Payload: []byte("x")})
	newConsumer(t, kc, "t").waitForEvent("e1", 20*time.Second)
	waitCheckpoint(t, o.Dir, g, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, mariadb.Options{BinlogFormat: "STATEMENT"}); err != nil {
		t.Fatal(err)
	}
	err := r.waitExit(t, 60*time.Second)
	if !errors.Is(err, preflight.ErrNotSetUp) || !strings.Contains(fmt.Sprint(err), "binlog_format is STATEMENT: SET GLOBAL binlog_format = 'ROW'") {
		t.Fatalf("err = %v, want the preflight error naming binlog_format; logs:\n%s", err, r.logText())
	}
	if got := readCheckpoint(t, o.Dir); got != g {
		t.Fatalf("checkpoint %q after the refusal, want %q", got, g)
	}
}

// A start set ahead of the server is refused from each origin, with the server's position, in
// the terms of the command that gave it.
func TestStartAheadIsRefused(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	w.commit(row{EventID: "e0", Key: "k", Topic: "t", Payload: []byte("x")})
	pos := w.position()
	// Far past the shared server's position, however many transactions earlier tests wrote.
	var parts []string
	aheadGTID := ""
	for _, p := range strings.Split(pos, ",") {
		if strings.HasPrefix(p, "0-1-") {
			aheadGTID = fmt.Sprintf("0-1-%d", gtidSeq(t, p)+1_000_000)
			p = aheadGTID
		}
		parts = append(parts, p)
	}
	ahead := strings.Join(parts, ",")
	if aheadGTID == "" {
		t.Fatalf("position %q has no 0-1-N", pos)
	}
	wants := []string{"start position is ahead of the server", "names transactions the server has not written (the server's position is " + pos + ")",
		"domain 0: " + aheadGTID + " is ahead of server id 1's last transaction in it"}
	check := func(t *testing.T, code int, out string, extra string, unwanted string) {
		t.Helper()
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		for _, w := range append(wants, extra) {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
		if unwanted != "" && strings.Contains(out, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, out)
		}
	}
	o := simpleCfg(t, w, kc, "")
	cfgPath := writeCfg(t, o)
	t.Run("checkpoint set", func(t *testing.T) {
		code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", ahead)
		check(t, code, out, "checkpoint set --gtid "+ahead+" names", "--from-gtid")
		if !strings.Contains(out, "outboxd checkpoint set --gtid '"+pos+"'") {
			t.Errorf("the fix is not a checkpoint set command:\n%s", out)
		}
		if got := readCheckpoint(t, o.Dir); got != "" {
			t.Errorf("checkpoint %q was saved", got)
		}
	})
	t.Run("--from-gtid", func(t *testing.T) {
		code, out := runBinary(t, "run", "--config", cfgPath, "--from-gtid", ahead, "--force")
		check(t, code, out, "--from-gtid '"+pos+"'", "")
	})
	t.Run("source.start", func(t *testing.T) {
		o2 := simpleCfg(t, w, kc, ahead)
		code, out := runBinary(t, "run", "--config", writeCfg(t, o2))
		check(t, code, out, "set source.start to a set the server has", "--from-gtid")
	})
}

// status and checkpoint show need no secret: they work with the password's variable unset
// and its file missing; status --addr needs no config at all.
func TestReadOnlyCommandsNeedNoPassword(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	admin := freeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	r := startRelay(t, o, daemon.Options{})
	g := w.commit(row{EventID: "e1", Key: "k", Topic: "t", Payload: []byte("x")})
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	waitHTTP(t, "http://"+admin+"/readyz", 20*time.Second, r)

	base := o.yaml()
	noVar := writeYAML(t, o.Dir, "novar.yaml", strings.Replace(base, `password: ""`, `password: "${OUTBOXD_E2E_UNSET_PASSWORD}"`, 1))
	noFile := writeYAML(t, o.Dir, "nofile.yaml", strings.Replace(base, `password: ""`, `password_file: `+filepath.Join(o.Dir, "missing-secret"), 1))
	for _, path := range []string{noVar, noFile} {
		code, out := runBinary(t, "checkpoint", "show", "--config", path)
		if code != 0 || !strings.Contains(out, g) {
			t.Errorf("checkpoint show --config %s exited %d, want the checkpoint %s:\n%s", filepath.Base(path), code, g, out)
		}
		code, out = runBinary(t, "status", "--config", path)
		if code != 0 || !strings.Contains(out, "checkpoint") {
			t.Errorf("status --config %s exited %d:\n%s", filepath.Base(path), code, out)
		}
		// run still needs the secret, and says which.
		code, out = runBinary(t, "run", "--config", path)
		if code != 2 || !(strings.Contains(out, "OUTBOXD_E2E_UNSET_PASSWORD") || strings.Contains(out, "source.password_file")) {
			t.Errorf("run --config %s exited %d, want 2 naming the secret:\n%s", filepath.Base(path), code, out)
		}
	}
	code, out := runBinary(t, "status", "--addr", admin)
	if code != 0 || !strings.Contains(out, "checkpoint") || !strings.Contains(out, "mariadb "+w.srv.Addr) {
		t.Errorf("status --addr exited %d:\n%s", code, out)
	}
	code, out = runBinary(t, "status", "--addr", admin, "--json")
	if code != 0 || !strings.Contains(out, g) {
		t.Errorf("status --addr --json exited %d:\n%s", code, out)
	}
	// Without either it asks outboxd's default admin.listen, as health does.
	if code, out := runBinary(t, "status"); code == 2 || (code != 0 && !strings.Contains(out, "127.0.0.1:9120")) {
		t.Errorf("status without --config or --addr exited %d, want it to ask 127.0.0.1:9120:\n%s", code, out)
	}
}

// lower_case_table_names=1: the server finds the outbox table under any spelling, but the binlog
// names it as stored, in lower case. A config that spells it otherwise would match no row and
// checkpoint past them all; run refuses with the spelling to use.
func TestRunRefusesTableNameCase(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{"--lower-case-table-names=1"}})
	w := newWorld(t, srv)
	o := simpleCfg(t, w, kafkaCluster(t, "t"), "")
	o.Tables = []string{w.schema + ".Outbox_Event"}
	wantRefusal(t, writeCfg(t, o), []string{"exactly as the server names them: " + w.schema + ".outbox_event"})
}
