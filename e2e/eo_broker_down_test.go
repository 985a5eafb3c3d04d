package e2e

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// A Kafka cluster that is down when an exactly-once outboxd starts is waited for, as the mysql
// store's writer is: the claim (and so the stream) waits with the reconnect backoff, logged,
// and once the cluster is up every row committed meanwhile arrives once, per key in order. It
// used to exit at once, where at-least-once waits.
func TestExactlyOnceWaitsForBrokerAtStart(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	useKafkaStore(t, kc, &o, "down")
	cfgPath := writeCfg(t, o)
	_, portStr, err := net.SplitHostPort(kc.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)
	kc.Close() // the cluster is down: nothing listens on its port

	kw := startKeyedWriter(t, w, 10*time.Millisecond)
	p := startBinary(t, "run", "--config", cfgPath)
	p.waitLog(t, "the Kafka brokers of checkpoint.sink are unreachable, retrying", 20*time.Second)
	time.Sleep(2 * time.Second) // a retry or two later it still waits
	if !p.running() {
		t.Fatalf("outboxd exited (%v) while the cluster was down:\n%s", p.err, tail(p.output(), 30))
	}

	// The cluster comes back on the same port, empty (a new cluster: the checkpoint topic is
	// created again, as check would).
	up, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	rd, err := kafkaread.NewReader(up.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	time.Sleep(time.Second) // rows keep flowing once it streams
	committed := kw.halt(t)
	rb := readBackCommitted(t, rd, up.ListenAddrs()[0], committed, 60*time.Second, payloadSeq(t))
	if rb.franz.Duplicates != 0 || rb.kcat.Duplicates != 0 {
		t.Errorf("duplicates: franz-go %d, kcat %d", rb.franz.Duplicates, rb.kcat.Duplicates)
	}
	t.Logf("%d committed while and after the cluster was down; each read once", len(committed))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("graceful stop exited %d:\n%s", code, tail(p.output(), 30))
	}
}
