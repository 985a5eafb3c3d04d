package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/logging/logcheck"
	"github.com/outboxd/outboxd/testenv/kafkafault"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// noise is what the libraries log for events that are normal for outboxd (it closed the
// connection itself, the server already dropped it, a pooled connection died and was replaced,
// a retry outboxd owns): never a warning or an error.
var noise = regexp.MustCompile(`(?i)unknown thread id|io\.ReadFull\(header\) failed|connection was bad|retry sync is disabled|closing bad idle connection|use of closed network connection`)

// The built binary's log, through a session an operator would see in a day: start, traffic, a
// broker that refuses produces for a while (retries with their backoff), the source
// connection cut under the binlog stream and the pool (a reconnect), and a SIGTERM. Every line
// of the combined stdout/stderr is one JSON object without a duplicate key, with an RFC 3339
// time in milliseconds or finer and every duration a Go duration string; the libraries' lines
// are in it as JSON with library=<name>, and their normal chatter is not at warn or error.
func TestLogStreamIsCleanJSON(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{}) // its own: the test restarts it
	w := newWorld(t, srv)
	proxy := proxyTo(t, w.srv.Addr)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Addr = proxy.Addr()
	p := startBinary(t, "run", "--config", writeCfg(t, o))
	c := newConsumer(t, kc, "t")

	w.commit(row{EventID: "before", Key: "k", Topic: "t", Payload: []byte("1")})
	c.waitForEvent("before", 30*time.Second)

	// Broker outage: the next produces are refused as retryable until 8 have been.
	var refused atomic.Int32
	kc.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= 8 {
			return nil, nil, false
		}
		kc.KeepControl()
		refused.Add(1)
		return kafkafault.ProduceError(kreq.(*kmsg.ProduceRequest), 19), nil, true // NOT_ENOUGH_REPLICAS
	})
	w.commit(row{EventID: "outage", Key: "k", Topic: "t", Payload: []byte("2")})
	c.waitForEvent("outage", 30*time.Second)
	if n := refused.Load(); n < 8 {
		t.Fatalf("only %d produces refused", n)
	}

	// Source reconnect: every connection through the proxy is reset (the binlog dump and the
	// pooled SQL connections); outboxd reconnects and delivers what was committed meanwhile.
	if n := proxy.ResetAll(); n == 0 {
		t.Fatal("no connection through the proxy to reset")
	}
	w.commit(row{EventID: "after-reset", Key: "k", Topic: "t", Payload: []byte("3")})
	c.waitForEvent("after-reset", 40*time.Second)
	p.waitLog(t, "source connection lost", 30*time.Second)

	// Source restart: MariaDB stops (outboxd retries, with its backoff in the log) and comes
	// back on the same port.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "source not inspectable before reconnecting", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, mariadb.Options{}); err != nil {
		t.Fatal(err)
	}
	db, err := srv.DB(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w.db = db
	w.commit(row{EventID: "after-restart", Key: "k", Topic: "t", Payload: []byte("4")})
	c.waitForEvent("after-restart", 60*time.Second)

	// The server drops the dump connection (a DBA's KILL): outboxd reconnects, and go-mysql's
	// KILL of that connection on close is answered "Unknown thread id".
	before := strings.Count(p.output(), "source connection lost")
	var dump int64
	deadline := time.Now().Add(20 * time.Second)
	// TIME >= 1: outboxd's stream, not the retention sampler's dump of a few milliseconds.
	for w.db.QueryRow("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%' AND time >= 1 ORDER BY time DESC LIMIT 1").Scan(&dump) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no binlog dump thread on the server; output:\n%s", p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.exec(fmt.Sprintf("KILL %d", dump))
	for strings.Count(p.output(), "source connection lost") == before {
		if time.Now().After(deadline) {
			t.Fatalf("KILL of the dump thread not seen; output:\n%s", p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.commit(row{EventID: "after-kill", Key: "k", Topic: "t", Payload: []byte("5")})
	c.waitForEvent("after-kill", 40*time.Second)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p.output())
	}

	out := p.output()
	lines, err := logcheck.Lines([]byte(out))
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, f := range lines {
		msg, _ := f["message"].(string)
		errText, _ := f["error"].(string)
		if lvl := f["level"]; (lvl == "warn" || lvl == "error") && (noise.MatchString(msg) || noise.MatchString(errText) && f["library"] != nil) {
			t.Errorf("library noise at %s: %v", lvl, f)
		}
		switch {
		case msg == "send not acknowledged, retrying":
			seen["send retry"] = f["backoff"] != nil
		case strings.HasPrefix(msg, "source connection lost"):
			seen["source retry"] = f["retry_in"] != nil
		case strings.HasPrefix(msg, "source not inspectable"):
			seen["source down"] = f["retry_in"] != nil
		case msg == "stopped":
			seen["stopped"] = true
		}
		if lib, ok := f["library"].(string); ok {
			seen["library "+lib] = true
		}
	}
	// The session went through what the test meant it to, with the durations in the lines.
	for _, want := range []string{"send retry", "source retry", "source down", "stopped"} {
		if !seen[want] {
			t.Errorf("no %q line (with its duration) in the log", want)
		}
	}
	t.Logf("%d lines; seen %v", len(lines), seen)
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// The same for a RocketMQ sink, whose client logs through rlog: start, delivery, the broker
// stopped for two seconds of retries and started again, SIGTERM. Every line is clean JSON, and
// closing the producer on SIGTERM makes the client log no warning or error.
func TestRocketMQLogStreamIsCleanJSON(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"T"}})
	o := rmqCfg(t, w, rc, "  - sink: rmq\n    topic: T\n")
	p := startBinary(t, "run", "--config", writeCfg(t, o))
	w.commit(row{EventID: "a", Key: "k", Topic: "t", Payload: []byte("1")})
	waitRMQ(t, rc, "T", 1, 30*time.Second)
	rc.StopBroker()
	w.commit(row{EventID: "b", Key: "k", Topic: "t", Payload: []byte("2")})
	p.waitLog(t, "send not acknowledged, retrying", 30*time.Second)
	time.Sleep(2 * time.Second)
	if err := rc.StartBroker(); err != nil {
		t.Fatal(err)
	}
	waitRMQ(t, rc, "T", 2, 60*time.Second)
	shutdownAt := len(p.output())
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p.output())
	}
	out := p.output()
	if _, err := logcheck.Lines([]byte(out)); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimRight(out[shutdownAt:], "\n"), "\n") {
		if f, err := logcheck.Line([]byte(l)); err == nil && f["library"] != nil && (f["level"] == "warn" || f["level"] == "error") {
			t.Errorf("library warning or error on a clean shutdown: %s", l)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
