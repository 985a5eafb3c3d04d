package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/kafkafault"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// A server that keeps binlogs 10 minutes: check warns under the default minimum of 24 h with the
// statement that fixes it, and verifies it under a minimum of 5 minutes; a running outboxd (as
// an account with only the documented grants) shows the retention, the age of the oldest binlog
// (the server's start, read by a one-shot dump that does not disturb its own stream) and the
// time left, which shrinks while a broker refuses the sends.
func TestBinlogRetentionCheckAndGauges(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{"--binlog-expire-logs-seconds=600"}})
	w := newWorld(t, srv)
	user := "ret" + w.schema
	w.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".* TO '" + user + "'@'%'")
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.User, o.Pass = user, "pw"
	o.Routes = "  - sink: main\n    topic: t\n"

	code, out, errOut := runSplit(t, []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}, "check", "--json")
	r := parseCheck(t, out)
	if code != 0 || !*r.OK {
		t.Fatalf("a short retention is a warning, not a problem: exit %d, %+v\n%s", code, r, errOut)
	}
	wn := hasItem(r.Warnings, "binlog_retention", "binlog retention")
	if wn == nil || !strings.Contains(wn.Message, "10m0s (binlog_expire_logs_seconds = 600)") || !strings.Contains(wn.Message, "source.min_binlog_retention 24h0m0s") ||
		!strings.Contains(wn.Fix, "SET GLOBAL binlog_expire_logs_seconds = 86400;") {
		t.Errorf("check warnings lack the retention with its fix: %+v", r.Warnings)
	}
	_, text, _ := runSplit(t, []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}, "check")
	if !strings.Contains(text, "binlog retention is 10m0s (binlog_expire_logs_seconds = 600)") || !strings.Contains(text, "[check binlog_retention]") {
		t.Errorf("check text lacks the retention warning:\n%s", text)
	}
	o.Source = "  min_binlog_retention: 5m\n"
	_, out, _ = runSplit(t, []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}, "check", "--json")
	r = parseCheck(t, out)
	if v := hasItem(r.Verified, "binlog_retention", "binlog retention"); v == nil || !strings.Contains(v.Message, "10m0s") ||
		hasItem(r.Warnings, "binlog_retention", "binlog retention") != nil {
		t.Errorf("a retention above the minimum is not verified with its value: verified %+v, warnings %+v", r.Verified, r.Warnings)
	}

	var up int64
	if err := w.db.QueryRow("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'").Scan(&up); err != nil {
		t.Fatal(err)
	}
	serverStart := time.Now().Add(-time.Duration(up) * time.Second)
	admin := admFreeAddr(t)
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	o.Source = "" // the default minimum: run warns at start and streams
	rel := startRelay(t, o, daemon.Options{})
	admWaitReady(t, admin, 200, 30*time.Second)
	if logs := rel.logText(); !strings.Contains(logs, "binlog retention is 10m0s (binlog_expire_logs_seconds = 600)") || !strings.Contains(logs, `"level":"warn"`) {
		t.Errorf("run did not warn about the retention at start:\n%s", logs)
	}
	c := newConsumer(t, kc, "t")
	w.commit(row{EventID: "first", Key: "k", Topic: "t", Payload: []byte("1")})
	c.waitForEvent("first", 30*time.Second)

	var vals map[string]float64
	admWaitFor(t, 20*time.Second, func() string { return fmt.Sprint(vals) }, func() bool {
		vals, _ = admScrape(t, admin)
		return vals["outboxd_binlog_retention_seconds"] == 600
	})
	// The oldest (and only) binlog was opened when the server started.
	age := vals["outboxd_binlog_oldest_age_seconds"]
	if want := time.Since(serverStart).Seconds(); age < want-3 || age > want+3 {
		t.Errorf("outboxd_binlog_oldest_age_seconds = %v, want about %v (the server's uptime)", age, want)
	}
	if rem := vals["outboxd_binlog_retention_remaining_seconds"]; rem < 590 || rem > 600 {
		t.Errorf("caught up: outboxd_binlog_retention_remaining_seconds = %v, want about 600", rem)
	}

	// The broker refuses the sends: the lag grows and the time left shrinks with it.
	var refusing atomic.Bool
	refusing.Store(true)
	kc.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !refusing.Load() {
			return nil, nil, false
		}
		return kafkafault.ProduceError(kreq.(*kmsg.ProduceRequest), 19), nil, true // NOT_ENOUGH_REPLICAS
	})
	w.commit(row{EventID: "held", Key: "k", Topic: "t", Payload: []byte("2")})
	admWaitFor(t, 20*time.Second, func() string { return fmt.Sprint(vals) }, func() bool {
		vals, _ = admScrape(t, admin)
		return vals["outboxd_lag_seconds"] >= 3
	})
	if rem, lag := vals["outboxd_binlog_retention_remaining_seconds"], vals["outboxd_lag_seconds"]; rem > 597 || rem < 600-lag-1 {
		t.Errorf("with lag %v s: remaining %v, want 600 - lag", lag, rem)
	}
	refusing.Store(false)
	c.waitForEvent("held", 30*time.Second)
	// The one-shot dumps did not displace outboxd's own binlog stream.
	if n := vals["outboxd_source_reconnects_total"]; n != 0 {
		t.Errorf("outboxd_source_reconnects_total = %v: the retention sampler disturbed the stream", n)
	}
}
