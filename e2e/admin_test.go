package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// admFreeAddr returns a loopback address with a port that was free a moment ago.
func admFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// admGet returns the status code and body of GET http://addr/path (code 0 when unreachable).
func admGet(addr, path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// admScrape reads /metrics over HTTP with the plain text parser and returns each unlabelled
// metric's value (the first child for labelled ones) by name, plus the raw families.
func admScrape(t *testing.T, addr string) (map[string]float64, map[string]*dto.MetricFamily) {
	t.Helper()
	code, body := admGet(addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	vals := map[string]float64{}
	for name, f := range fams {
		if len(f.Metric) == 0 {
			continue
		}
		m := f.Metric[0]
		switch {
		case m.Gauge != nil:
			vals[name] = m.Gauge.GetValue()
		case m.Counter != nil:
			vals[name] = m.Counter.GetValue()
		}
	}
	return vals, fams
}

// admStatus reads /status as JSON.
func admStatus(t *testing.T, addr string) admin.Status {
	t.Helper()
	code, body := admGet(addr, "/status")
	if code != http.StatusOK {
		t.Fatalf("/status %d: %s", code, body)
	}
	var st admin.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v: %s", err, body)
	}
	return st
}

// waitFor polls cond every 100 ms until it holds, failing with what() after timeout.
func admWaitFor(t *testing.T, timeout time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func admWaitReady(t *testing.T, addr string, wantCode int, timeout time.Duration) string {
	t.Helper()
	var code int
	var body string
	admWaitFor(t, timeout, func() string { return fmt.Sprintf("/readyz %d, want %d: %s", code, wantCode, body) }, func() bool {
		code, body = admGet(addr, "/readyz")
		return code == wantCode
	})
	return body
}

// The lag gauge tells the truth: 0 on an idle database (heartbeats prove it), near 0 while
// other tables are busy, and growing on every admScrape while the broker is down; /readyz follows
// the broker; /status has its fields.
func TestAdminLagReadinessAndStatus(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc, port, dataDir := restartableKafka(t, "t")
	admin := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})

	admWaitReady(t, admin, http.StatusOK, 20*time.Second)
	if code, _ := admGet(admin, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}

	// (a) Idle: the server's heartbeats show nothing is newer, so lag is 0.
	var vals map[string]float64
	admWaitFor(t, 10*time.Second, func() string { return fmt.Sprintf("lag %v", vals["outboxd_lag_seconds"]) }, func() bool {
		vals, _ = admScrape(t, admin)
		return vals["outboxd_lag_seconds"] == 0 && vals["outboxd_heartbeats_received_total"] > 0
	})
	if vals["outboxd_source_connected"] != 1 {
		t.Errorf("source_connected = %v", vals["outboxd_source_connected"])
	}

	// (b) Busy non-outbox writes: many transactions, none for outbox; lag stays near 0.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if _, err := w.db.Exec("INSERT INTO " + w.schema + ".orders (customer) VALUES ('busy')"); err != nil {
				t.Errorf("busy insert: %v", err)
				return
			}
		}
	})
	time.Sleep(time.Second)
	for range 6 {
		vals, _ = admScrape(t, admin)
		if lag := vals["outboxd_lag_seconds"]; lag >= 2 {
			t.Errorf("lag %.3fs under busy non-outbox writes, want < 2s", lag)
		}
		time.Sleep(300 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	evBefore := vals["outboxd_binlog_events_read_total"]
	if evBefore < 100 {
		t.Errorf("binlog_events_read_total = %v after busy writes", evBefore)
	}

	// Deliveries are counted per sink and route.
	w.commit(row{EventID: "a1", Key: "k", Topic: "t", Payload: []byte("x")})
	admWaitFor(t, 20*time.Second, func() string { return "delivered counter" }, func() bool {
		_, fams := admScrape(t, admin)
		f := fams["outboxd_events_delivered_total"]
		if f == nil {
			return false
		}
		for _, m := range f.Metric {
			l := admLabels(m)
			if l["sink"] == "main" && l["route"] == "0" && m.Counter.GetValue() >= 1 {
				return true
			}
		}
		return false
	})

	// (f) /status.
	code, body := admGet(admin, "/status")
	if code != http.StatusOK {
		t.Fatalf("/status %d %s", code, body)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "flavor", "uptime_seconds", "source", "read_gtid_set", "checkpoint_gtid_set",
		"acked_gtid_set", "lag_seconds", "oldest_unacked_event_age_seconds", "in_flight", "sinks"} {
		if _, ok := st[k]; !ok {
			t.Errorf("/status lacks %q: %s", k, body)
		}
	}
	if st["version"] != "e2e-test" || st["flavor"] != "mariadb" || st["read_gtid_set"] == "" {
		t.Errorf("/status = %s", body)
	}

	// (c) The broker goes down: lag and the oldest unacknowledged age grow on every admScrape.
	kc.Close()
	for i := range 3 {
		w.commit(row{EventID: fmt.Sprintf("down%d", i), Key: "k", Topic: "t", Payload: []byte("x")})
	}
	time.Sleep(1500 * time.Millisecond)
	v1, _ := admScrape(t, admin)
	time.Sleep(1500 * time.Millisecond)
	v2, _ := admScrape(t, admin)
	for _, name := range []string{"outboxd_lag_seconds", "outboxd_oldest_unacked_event_age_seconds"} {
		if !(v1[name] > 0 && v2[name] >= v1[name]+1) {
			t.Errorf("%s did not grow while the broker was down: %v then %v", name, v1[name], v2[name])
		}
	}
	if v2["outboxd_inflight_events"] != 3 {
		t.Errorf("inflight_events = %v, want 3", v2["outboxd_inflight_events"])
	}
	// (e) ... and /readyz says which sink.
	body = admWaitReady(t, admin, http.StatusServiceUnavailable, 15*time.Second)
	if !strings.Contains(body, "sink main") {
		t.Errorf("/readyz body does not name the sink: %s", body)
	}
	if v, _ := admScrape(t, admin); v["outboxd_sink_up"] != 0 {
		t.Errorf("sink_up = %v while the broker is down", v["outboxd_sink_up"])
	}

	// The broker comes back: ready again, everything delivered, lag back to 0.
	restartKafka(t, port, dataDir)
	admWaitReady(t, admin, http.StatusOK, 30*time.Second)
	admWaitFor(t, 20*time.Second, func() string { return fmt.Sprintf("lag %v", vals) }, func() bool {
		vals, _ = admScrape(t, admin)
		return vals["outboxd_lag_seconds"] == 0 && vals["outboxd_inflight_events"] == 0
	})
	if vals["outboxd_send_retries_total"] == 0 || vals["outboxd_checkpoint_saves_total"] == 0 {
		t.Errorf("retries %v, checkpoint saves %v", vals["outboxd_send_retries_total"], vals["outboxd_checkpoint_saves_total"])
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
}

func admLabels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// The built binary with a password-protected user and the heartbeat row on a quiet database:
// the checkpoint keeps moving; /readyz turns 503 while MariaDB is down and 200 once it is
// back (outboxd reconnects); `outboxd status` prints the state; the password appears in
// neither /status nor the logs.
func TestAdminHeartbeatReconnectAndStatusCommand(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	const password = "pw-Secr3t-e2e-91"
	w.exec("CREATE DATABASE outboxd")
	w.exec("CREATE TABLE outboxd.heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)")
	w.exec("CREATE USER 'relay'@'%' IDENTIFIED BY '" + password + "'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'relay'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'relay'@'%'")
	w.exec("GRANT SELECT, INSERT, UPDATE ON outboxd.heartbeat TO 'relay'@'%'")

	kc := kafkaCluster(t, "t")
	admin := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.User, o.Pass = "relay", password
	o.Interval = "200ms"
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	cfgYAML := strings.Replace(o.yaml(), "source:\n", "source:\n  heartbeat: {table: outboxd.heartbeat, interval: 300ms}\n", 1)
	cfgPath := filepath.Join(o.Dir, "outboxd.yaml")
	admWriteFile(t, cfgPath, cfgYAML)
	p := startBinary(t, "run", "--config", cfgPath)

	admWaitReady(t, admin, http.StatusOK, 30*time.Second)

	// (d) Nothing is written to the outbox, yet the checkpoint moves: the heartbeat row's
	// transactions pass through and are acknowledged.
	var c1 string
	admWaitFor(t, 10*time.Second, func() string { return "first checkpoint; output:\n" + p.output() }, func() bool {
		c1 = readCheckpoint(t, o.Dir)
		return c1 != ""
	})
	time.Sleep(1500 * time.Millisecond)
	if c2 := readCheckpoint(t, o.Dir); c2 == c1 || gtidSeq(t, c2) <= gtidSeq(t, c1) {
		t.Fatalf("checkpoint did not move on a quiet database with the heartbeat row: %q then %q", c1, c2)
	}
	var hb int
	if err := w.db.QueryRow("SELECT COUNT(*) FROM outboxd.heartbeat").Scan(&hb); err != nil || hb != 1 {
		t.Fatalf("heartbeat rows = %d, %v; want 1", hb, err)
	}

	// `outboxd status` prints the state for a person.
	code, out := runBinary(t, "status", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("outboxd status exit %d:\n%s", code, out)
	}
	for _, want := range []string{"mariadb " + srv.Addr + ", connected", "checkpoint", "lag", "sink main", "kafka up"} {
		if !strings.Contains(out, want) {
			t.Errorf("outboxd status lacks %q:\n%s", want, out)
		}
	}

	// (e) MariaDB stops: not ready, naming the source; back: ready again.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	body := admWaitReady(t, admin, http.StatusServiceUnavailable, 20*time.Second)
	if !strings.Contains(body, "source") {
		t.Errorf("/readyz body does not name the source: %s", body)
	}
	if v, _ := admScrape(t, admin); v["outboxd_source_connected"] != 0 {
		t.Errorf("source_connected = %v while MariaDB is down", v["outboxd_source_connected"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, mariadb.Options{}); err != nil {
		t.Fatal(err)
	}
	admWaitReady(t, admin, http.StatusOK, 60*time.Second)
	// Delivery works after the reconnect.
	w2 := &world{t: t, srv: srv, schema: w.schema}
	db, err := srv.DB(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w2.db = db
	w2.commit(row{EventID: "after-restart", Key: "k", Topic: "t", Payload: []byte("x")})
	newConsumer(t, kc, "t").waitForEvent("after-restart", 30*time.Second)

	// (f) No password in /status or the logs.
	_, status := admGet(admin, "/status")
	if strings.Contains(status, password) {
		t.Errorf("/status contains the password: %s", status)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Errorf("outboxd exit %d:\n%s", code, p.output())
	}
	logs := p.output()
	if strings.Contains(logs, password) {
		t.Errorf("logs contain the password")
	}
	if !strings.Contains(logs, "reconnecting") {
		t.Errorf("logs do not mention the reconnect:\n%s", logs)
	}
}

func admWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
