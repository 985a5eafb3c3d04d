package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/faultproxy"
)

// A network path to MariaDB that stops answering without closing (a blackhole) is detected by
// the binlog read timeout, not waited on forever: outboxd reconnects once the path is back and
// delivers what was committed meanwhile.
func TestStalledSourceIsDetected(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	proxy := proxyTo(t, w.srv.Addr)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Addr = proxy.Addr()
	rel := startRelay(t, o, daemon.Options{})

	w.commit(row{EventID: "before-stall", Key: "k", Topic: "t", Payload: []byte("1")})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("before-stall", 20*time.Second)

	// The path goes silent, but no connection is closed: only the read timeout (10 s, with
	// server heartbeats every second) can notice.
	proxy.SetMode(faultproxy.Blackhole)
	w.commit(row{EventID: "during-stall", Key: "k", Topic: "t", Payload: []byte("2")})
	deadline := time.Now().Add(25 * time.Second)
	for !strings.Contains(rel.logText(), "no data or heartbeat within") {
		if time.Now().After(deadline) {
			t.Fatalf("the stall was not detected within 25 s; logs:\n%s", rel.logText())
		}
		time.Sleep(200 * time.Millisecond)
	}
	proxy.SetMode(faultproxy.Pass)
	w.commit(row{EventID: "after-stall", Key: "k", Topic: "t", Payload: []byte("3")})
	rs := c.waitForEvent("after-stall", 40*time.Second)
	checkPerKeyOrder(t, rs, []string{"before-stall", "during-stall", "after-stall"})
}

// proxyTo starts a faultproxy in front of addr, closed at the test's end.
func proxyTo(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
