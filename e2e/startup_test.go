package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/faultproxy"
)

// With the database unreachable at start, run keeps retrying and the admin server answers
// from the first second: /healthz 200, /readyz 503 naming the source and its error, /status
// and `outboxd status` with the same reason, outboxd_source_connected 0. Once the server is
// reachable it becomes ready and delivers.
func TestStartupAdminAnswersWithSourceDown(t *testing.T) {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	adm := admFreeAddr(t)
	srcAddr := admFreeAddr(t) // nothing listens here until the proxy below
	o := simpleCfg(t, w, kc, w.position())
	o.Addr = srcAddr
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", adm)
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})

	wantReason := "starting: connecting to source " + srcAddr + ": "
	// 503 comes at once; the reason carries the error from the first refused attempt on.
	var body string
	admWaitFor(t, 10*time.Second, func() string {
		return fmt.Sprintf("/readyz while the source is down lacks %q and the error:\n%s\nlog:\n%s", wantReason, body, r.logText())
	}, func() bool {
		var code int
		code, body = admGet(adm, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, wantReason) && strings.Contains(body, "connection refused")
	})
	if code, _ := admGet(adm, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while starting", code)
	}
	vals, _ := admScrape(t, adm)
	if v, ok := vals["outboxd_source_connected"]; !ok || v != 0 {
		t.Errorf("outboxd_source_connected = %v (present %v), want 0", v, ok)
	}
	st := admStatus(t, adm)
	if st.Ready || len(st.NotReady) != 1 || !strings.HasPrefix(st.NotReady[0], wantReason) ||
		st.Source.Connected || !strings.Contains(st.Source.LastError, "connection refused") || st.HA.Role != "starting" {
		t.Errorf("/status while the source is down: ready %v, not_ready %q, source %+v, role %q", st.Ready, st.NotReady, st.Source, st.HA.Role)
	}
	code, out := runBinary(t, "status", "--addr", adm)
	if code != 0 || !strings.Contains(out, "NOT READY    "+wantReason) || !strings.Contains(out, "NOT connected") {
		t.Errorf("outboxd status: exit %d:\n%s", code, out)
	}

	p, err := faultproxy.Listen(srcAddr, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	admWaitReady(t, adm, http.StatusOK, 30*time.Second)
	if st := admStatus(t, adm); !st.Ready || len(st.NotReady) != 0 || !st.Source.Connected || st.HA.Role != "leader" {
		t.Errorf("/status once ready: ready %v, not_ready %q, source %+v, role %q", st.Ready, st.NotReady, st.Source, st.HA.Role)
	}
	c := newConsumer(t, kc, "t")
	w.commit(row{EventID: "after-start", Key: "k", Topic: "t", Payload: []byte("{}")})
	c.waitForEvent("after-start", 20*time.Second)
}

// With the broker down at start, the admin server answers with the sink's reason in /readyz,
// /status and `outboxd status`; the sink is logged unreachable once at warn, naming it, and
// its recovery once at info after the broker comes.
func TestStartupAdminAnswersWithBrokerDown(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	dead, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	brokerAddr := dead.ListenAddrs()[0]
	dead.Close()
	adm := admFreeAddr(t)
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Tables: []string{w.schema + ".outbox_event"},
		Sinks:  map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s}", brokerAddr)},
		Routes: "  - sink: main\n    topic: \"{topic}\"\n",
		Dir:    t.TempDir(),
		Extra:  fmt.Sprintf("admin: {listen: %q}\n", adm),
	}
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})

	const warnMsg = `"sink unreachable:`
	const infoMsg = `"sink reachable again"`
	var body string
	admWaitFor(t, 20*time.Second, func() string { return "/readyz: " + body + "\nlog:\n" + r.logText() }, func() bool {
		var code int
		code, body = admGet(adm, "/readyz")
		// Once the stream is up, the sink is the one reason left (status prints it first).
		return code == http.StatusServiceUnavailable && strings.Contains(body, "sink main: unreachable: ") &&
			!strings.Contains(body, "binlog stream not connected") && strings.Contains(r.logText(), warnMsg)
	})
	if code, _ := admGet(adm, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	st := admStatus(t, adm)
	if s := st.Sinks["main"]; st.Ready || s.Up || len(s.NotReady) == 0 || !strings.HasPrefix(s.NotReady[0], "sink main: unreachable: ") {
		t.Errorf("/status with the broker down: ready %v, not_ready %q, sink %+v", st.Ready, st.NotReady, s)
	}
	code, out := runBinary(t, "status", "--addr", adm)
	if code != 0 || !strings.Contains(out, "NOT READY    sink main: unreachable: ") || !strings.Contains(out, "sink main    kafka DOWN: ") {
		t.Errorf("outboxd status: exit %d:\n%s", code, out)
	}

	kc := kafkaOn(t, brokerAddr, kfake.SeedTopics(3, "t"))
	admWaitReady(t, adm, http.StatusOK, 30*time.Second)
	admWaitFor(t, 15*time.Second, func() string { return "no recovery logged:\n" + r.logText() }, func() bool {
		return strings.Contains(r.logText(), infoMsg)
	})
	c := newConsumer(t, kc, "t")
	w.commit(row{EventID: "after-broker", Key: "k", Topic: "t", Payload: []byte("{}")})
	c.waitForEvent("after-broker", 20*time.Second)
	time.Sleep(6 * time.Second) // another probe round: nothing more is logged

	var warns, infos int
	for _, line := range strings.Split(r.logText(), "\n") {
		switch {
		case strings.Contains(line, warnMsg):
			warns++
			if !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, `"sink":"main"`) {
				t.Errorf("warning does not name the sink at warn: %s", line)
			}
		case strings.Contains(line, infoMsg):
			infos++
			if !strings.Contains(line, `"level":"info"`) || !strings.Contains(line, `"sink":"main"`) {
				t.Errorf("recovery does not name the sink at info: %s", line)
			}
		}
	}
	if warns != 1 || infos != 1 {
		t.Errorf("%d warnings and %d recoveries logged, want 1 each:\n%s", warns, infos, r.logText())
	}
}
