package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// check's report is its OK/WARN/FAIL lines only: the RocketMQ client's own log lines (route
// lookups, a NameServer that does not answer) stay out of it, with the sink's NameServer up
// and down alike.
func TestCheckReportHasNoClientLogLines(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"orders"}})
	routes := "  - sink: rmq\n    topic: orders\n"
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close() // nothing listens there now
	for _, c := range []struct {
		name, nameserver string
		code             int
	}{
		{"up", rc.NameServer(), 0},
		{"down", downAddr, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := rmqCfg(t, w, rc, routes)
			o.Sinks = map[string]string{"rmq": fmt.Sprintf("{type: rocketmq, nameservers: [%q], send_timeout: 1s}", c.nameserver)}
			code, out := runBinary(t, "check", "--config", writeCfg(t, o))
			if code != c.code {
				t.Fatalf("check exited %d, want %d:\n%s", code, c.code, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(line, "OK ") && !strings.HasPrefix(line, "WARN ") && !strings.HasPrefix(line, "FAIL ") && !strings.HasPrefix(line, "outboxd: ") {
					t.Errorf("check printed a line that is not part of its report: %q\nall output:\n%s", line, out)
				}
			}
		})
	}
}
