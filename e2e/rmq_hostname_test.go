package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// A RocketMQ NameServer given by host name (localhost:PORT) works end to end through
// outboxd; one that does not resolve is reported by check and by /readyz, like an unreachable
// NameServer, instead of a config error.
func TestRocketMQNameServerHostName(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"orders"}})
	_, port, err := net.SplitHostPort(rc.NameServer())
	if err != nil {
		t.Fatal(err)
	}
	routes := "  - sink: rmq\n    topic: orders\n"

	t.Run("localhost", func(t *testing.T) {
		o := rmqCfg(t, w, rc, routes)
		o.Sinks = map[string]string{"rmq": fmt.Sprintf("{type: rocketmq, nameservers: [\"localhost:%s\"], send_timeout: 1s}", port)}
		if code, out := runBinary(t, "check", "--config", writeCfg(t, o)); code != 0 {
			t.Fatalf("check with a host name NameServer: exit %d\n%s", code, out)
		}
		startRelay(t, o, daemon.Options{})
		var committed []string
		keyOf := map[string]string{}
		for i := range 6 {
			id, key := fmt.Sprintf("h%d", i), fmt.Sprintf("k%d", i%2)
			w.commit(row{EventID: id, Key: key, Topic: "orders", Payload: []byte(id)})
			committed = append(committed, id)
			keyOf[id] = key
		}
		checkRMQKeyOrder(t, waitRMQ(t, rc, "orders", len(committed), 30*time.Second), committed, keyOf)
		waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)
	})

	t.Run("unresolvable", func(t *testing.T) {
		// A label over 63 characters: the resolver refuses it without asking a DNS server,
		// so the test sends nothing off the machine.
		name := strings.Repeat("n", 64) + ".mq.svc"
		o := rmqCfg(t, w, rc, routes)
		o.Sinks = map[string]string{"rmq": fmt.Sprintf("{type: rocketmq, nameservers: [\"%s:%s\"], send_timeout: 1s}", name, port)}
		code, out := runBinary(t, "check", "--config", writeCfg(t, o))
		if code == 0 || !strings.Contains(out, name) || !strings.Contains(out, "does not resolve") {
			t.Fatalf("check with an unresolvable NameServer: exit %d, want an error naming it:\n%s", code, out)
		}
		admin := admFreeAddr(t)
		o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
		startRelay(t, o, daemon.Options{})
		var status int
		var body string
		admWaitFor(t, 20*time.Second, func() string { return fmt.Sprintf("/readyz %d: %s", status, body) }, func() bool {
			status, body = admGet(admin, "/readyz")
			return status == http.StatusServiceUnavailable && strings.Contains(body, "does not resolve")
		})
		if !strings.Contains(body, "sink rmq") || !strings.Contains(body, name) {
			t.Fatalf("/readyz does not name the sink and the host: %s", body)
		}
	})
}
