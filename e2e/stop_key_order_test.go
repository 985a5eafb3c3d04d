package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under on_poison: stop, a row the sink refuses for good (over max_message_bytes) stops outboxd
// before the later row of its key, committed with it, is sent. Raising the limit, as the error
// says, and starting again delivers the two in commit order.
func TestStopOnRejectedRowHoldsItsKey(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.OnPoison = "stop"
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 4096}", kc.ListenAddrs()[0])}
	cfgPath := writeCfg(t, o)
	c := newConsumer(t, kc, "t")

	p := startBinary(t, "run", "--config", cfgPath)
	w.commit(row{EventID: "big", Key: "k", Topic: "t", Payload: []byte(strings.Repeat("x", 8192))},
		row{EventID: "after", Key: "k", Topic: "t", Payload: []byte("after")},
		row{EventID: "other", Key: "o", Topic: "t", Payload: []byte("other")})
	if code := p.wait(t, 30*time.Second); code != 1 || !strings.Contains(p.output(), "max_message_bytes") {
		t.Fatalf("exit %d, want 1 naming max_message_bytes:\n%s", code, p.output())
	}
	for _, r := range c.settle(time.Second) {
		if id := header(r, "event_id"); id == "after" {
			t.Fatal("the row after the rejected one, of the same key, was delivered before the stop")
		}
	}

	o.Sinks["main"] = fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 65536}", kc.ListenAddrs()[0])
	cfgPath = writeCfg(t, o)
	p = startBinary(t, "run", "--config", cfgPath)
	c.waitForEvent("after", 30*time.Second)
	checkPerKeyOrder(t, c.settle(500*time.Millisecond), []string{"big", "after", "other"})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.output())
	}
}
