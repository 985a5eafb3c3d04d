package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// What the docker-compose stack relies on, with the real binary on real MariaDB:
//   - a RocketMQ broker that names itself by host name (brokerIP1 = rmq-broker in
//     deploy/rocketmq/broker.conf) is reached by resolving that name, so the stack needs no
//     fixed addresses;
//   - `outboxd health`, the container's healthcheck, exits 0 while /healthz answers, 1 with
//     --ready while /readyz answers 503, and 1 when nothing listens.
func TestComposeBrokerHostNameAndHealth(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	routes := "  - sink: rmq\n    topic: orders\n"

	t.Run("broker by host name, ready", func(t *testing.T) {
		rc := rmqCluster(t, rocketmq.Options{Topics: []string{"orders"}, BrokerHost: "localhost"})
		o := rmqCfg(t, w, rc, routes)
		admin := admFreeAddr(t)
		_, port, _ := net.SplitHostPort(admin)
		o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
		p := startBinary(t, "run", "--config", writeCfg(t, o))
		admWaitReady(t, admin, http.StatusOK, 30*time.Second)

		var committed []string
		keyOf := map[string]string{}
		for i := range 6 {
			id, key := fmt.Sprintf("bh%d", i), fmt.Sprintf("k%d", i%2)
			w.commit(row{EventID: id, Key: key, Topic: "orders", Payload: []byte(id)})
			committed = append(committed, id)
			keyOf[id] = key
		}
		checkRMQKeyOrder(t, waitRMQ(t, rc, "orders", len(committed), 30*time.Second), committed, keyOf)
		waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)

		for _, args := range [][]string{{"health"}, {"health", "--ready"}} {
			// The compose config's admin.listen form (0.0.0.0:9120) is probed on loopback.
			args = append(args, "--addr", "0.0.0.0:"+port)
			if code, out := runBinary(t, args...); code != 0 || !strings.Contains(out, " 200 ") {
				t.Errorf("%v against a ready outboxd: exit %d, want 0\n%s\noutboxd:\n%s", args, code, out, p.output())
			}
		}
	})

	t.Run("not ready, then not listening", func(t *testing.T) {
		rc := rmqCluster(t, rocketmq.Options{Topics: []string{"orders"}})
		_, nsPort, _ := net.SplitHostPort(rc.NameServer())
		o := rmqCfg(t, w, rc, routes)
		// A label over 63 characters: refused by the resolver without asking a DNS server.
		o.Sinks = map[string]string{"rmq": fmt.Sprintf("{type: rocketmq, nameservers: [\"%s.mq.svc:%s\"], send_timeout: 1s}", strings.Repeat("n", 64), nsPort)}
		admin := admFreeAddr(t)
		o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
		p := startBinary(t, "run", "--config", writeCfg(t, o))
		admWaitReady(t, admin, http.StatusServiceUnavailable, 30*time.Second)

		if code, out := runBinary(t, "health", "--addr", admin); code != 0 {
			t.Errorf("health (liveness) while the sink is unreachable: exit %d, want 0\n%s", code, out)
		}
		code, out := runBinary(t, "health", "--ready", "--addr", admin)
		if code != 1 || !strings.Contains(out, "503") || !strings.Contains(out, "sink rmq") {
			t.Errorf("health --ready while not ready: exit %d, want 1 naming the sink\n%s", code, out)
		}

		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t, 40*time.Second)
		if code, out := runBinary(t, "health", "--addr", admin, "--timeout", "2s"); code != 1 {
			t.Errorf("health with nothing listening: exit %d, want 1\n%s", code, out)
		}
	})
}
