package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var effectivelyOnceOrders = flag.Int("effectively-once-orders", 200,
	"paid orders in TestEffectivelyOnce (make effectively-once runs a longer version)")

var (
	benefitsOnce sync.Once
	benefitsBin  string
	benefitsErr  error
)

// buildBenefits builds the example consumer, cmd/benefits, once per test binary.
func buildBenefits(t *testing.T) string {
	t.Helper()
	benefitsOnce.Do(func() {
		benefitsBin = filepath.Join(filepath.Dir(binPath), "benefits")
		_, self, _, _ := runtime.Caller(0)
		build := exec.Command("go", "build", "-o", benefitsBin, "./cmd/benefits")
		build.Dir = filepath.Join(filepath.Dir(self), "..")
		if out, err := build.CombinedOutput(); err != nil {
			benefitsErr = fmt.Errorf("build cmd/benefits: %v\n%s", err, out)
		}
	})
	if benefitsErr != nil {
		t.Fatal(benefitsErr)
	}
	return benefitsBin
}

// End to end, effectively once: the shop commits paid orders while outboxd is killed -9 again
// and again (each restart resends what came after its checkpoint) and the example consumer is
// killed -9 now and then (its uncommitted work is rolled back, its uncommitted offsets fetched
// again). Then outboxd replays the whole stream once more from the start. At the end every paid
// order has exactly one benefit row, and the dedup table matches the benefit table one to one:
// every mark PROCESSED, every mark with its benefit, every benefit with its mark.
func TestEffectivelyOnce(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.paid")
	start := w.position()
	o := simpleCfg(t, w, kc, start)
	o.Interval = "300ms"
	cfgPath := writeCfg(t, o)
	benefitsDB := w.schema + "_benefits"
	w.exec("CREATE DATABASE " + benefitsDB)
	bin := buildBenefits(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))

	relayRuns, consumerRuns := 0, 0
	startOutboxd := func(args ...string) *proc {
		relayRuns++
		return startBinary(t, append([]string{"run", "--config", cfgPath}, args...)...)
	}
	startConsumer := func() *proc {
		consumerRuns++
		return startProgram(t, bin, "--brokers", kc.ListenAddrs()[0], "--topic", "order.paid", "--group", "benefits",
			"--dsn", w.srv.RootDSN(benefitsDB))
	}
	kill := func(p *proc) {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	adm := kadmClient(t, kc.ListenAddrs())
	// The consumer is killed only while its group is stable with it alone and it has handled
	// messages. kfake never expires a member that was killed after its SyncGroup went out and
	// before the answer came back (it restarts a member's session timer only when a reply
	// reaches it), so a kill in the middle of a rebalance leaves a member that holds its
	// partitions forever. A killed member's partitions wait for its 6 s session timeout, as
	// they would on a real broker.
	consumerSettled := func(p *proc) bool {
		if !strings.Contains(p.output(), "processed ") && !strings.Contains(p.output(), "duplicate ") {
			return false
		}
		gs, err := adm.DescribeGroups(context.Background(), "benefits")
		if err != nil {
			return false
		}
		g, ok := gs["benefits"]
		return ok && g.State == "Stable" && len(g.Members) == 1
	}

	n := *effectivelyOnceOrders
	relay, cons := startOutboxd(), startConsumer()
	// Chaos while the orders come: outboxd killed every 0.7-1.5 s, the consumer every 1.5-3 s
	// when it is settled (see consumerSettled).
	nextRelayKill := time.Now().Add(time.Duration(700+rng.IntN(800)) * time.Millisecond)
	nextConsumerKill := time.Now().Add(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
	for i := 1; i <= n; {
		// Mostly one paid order per transaction, every fifth transaction two.
		rows := []row{paidOrder(i)}
		if i%5 == 0 && i < n {
			rows = append(rows, paidOrder(i+1))
		}
		w.commit(rows...)
		i += len(rows)
		time.Sleep(40 * time.Millisecond)

		now := time.Now()
		if now.After(nextRelayKill) {
			kill(relay)
			relay = startOutboxd()
			nextRelayKill = now.Add(time.Duration(700+rng.IntN(800)) * time.Millisecond)
		}
		if now.After(nextConsumerKill) && consumerSettled(cons) {
			kill(cons)
			cons = startConsumer()
			nextConsumerKill = now.Add(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
		}
	}

	benefits := func() int {
		var c int
		if err := w.db.QueryRow("SELECT COUNT(*) FROM " + benefitsDB + ".benefit").Scan(&c); err != nil &&
			!strings.Contains(err.Error(), "doesn't exist") { // before the consumer's first start created it
			t.Fatal(err)
		}
		return c
	}
	waitBenefits := func(what string) {
		deadline := time.Now().Add(40 * time.Second)
		for benefits() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d benefits within 40s; %s\noutboxd:\n%s\nconsumer:\n%s", what, benefits(), n, offsetsReport(t, kc.ListenAddrs()), tail(relay.output(), 40), tail(cons.output(), 300))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitBenefits("after the chaos")
	kill(relay)

	// Replay everything: n more deliveries, all duplicates to the consumer.
	before := endOffsets(t, kc.ListenAddrs())
	relay = startOutboxd("--from-gtid", start, "--force")
	deadline := time.Now().Add(30 * time.Second)
	for killed := false; endOffsets(t, kc.ListenAddrs()) < before+int64(n) || !killed; {
		if !killed && consumerSettled(cons) { // once more in the middle of the duplicates
			kill(cons)
			cons = startConsumer()
			killed = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replay did not resend %d events within 30s\n%s", n, tail(relay.output(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := endOffsets(t, kc.ListenAddrs())
	waitCommitted(t, kc.ListenAddrs(), "benefits", total, 30*time.Second)
	kill(relay)
	kill(cons)

	// Every paid order has exactly one benefit (order_id is the key: count and range say all
	// are there), and marks and benefits match one to one, on every row.
	q := func(query string) int {
		var c int
		if err := w.db.QueryRow(strings.ReplaceAll(query, "B.", benefitsDB+".")).Scan(&c); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return c
	}
	checks := []struct {
		what  string
		query string
		want  int
	}{
		{"benefit rows", "SELECT COUNT(*) FROM B.benefit", n},
		{"orders 1..n with a benefit", fmt.Sprintf("SELECT COUNT(DISTINCT order_id) FROM B.benefit WHERE order_id BETWEEN 1 AND %d", n), n},
		{"marks", "SELECT COUNT(*) FROM B.consumed_event", n},
		{"PROCESSED marks", "SELECT COUNT(*) FROM B.consumed_event WHERE status = 'PROCESSED'", n},
		{"marks without their benefit", "SELECT COUNT(*) FROM B.consumed_event c LEFT JOIN B.benefit b ON b.event_id = c.event_id WHERE b.order_id IS NULL", 0},
		{"benefits without their mark", "SELECT COUNT(*) FROM B.benefit b LEFT JOIN B.consumed_event c ON c.event_id = b.event_id WHERE c.event_id IS NULL", 0},
		{"benefits whose event is not the order's", "SELECT COUNT(*) FROM B.benefit WHERE event_id <> CONCAT('paid-', order_id)", 0},
		{"quarantined events", "SELECT COUNT(*) FROM B.quarantined_event", 0},
	}
	for _, c := range checks {
		if got := q(c.query); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	t.Logf("%d paid orders; %d deliveries in Kafka (%d resent); outboxd started %d times, the consumer %d times",
		n, total, total-int64(n), relayRuns, consumerRuns)
}

func paidOrder(i int) row {
	return row{EventID: fmt.Sprintf("paid-%d", i), Key: fmt.Sprintf("c%d", i%5), Topic: "order.paid",
		Payload: fmt.Appendf(nil, `{"order_id": %d, "customer": "c%d", "amount_cents": %d}`, i, i%5, 1000+i)}
}

// endOffsets is the sum of order.paid's partition end offsets: every delivery, resends included.
func endOffsets(t *testing.T, brokers []string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "order.paid")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum
}

// waitCommitted waits until group's committed offsets on order.paid add up to total.
func waitCommitted(t *testing.T, brokers []string, group string, total int64, timeout time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(timeout)
	for {
		offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
		var sum int64
		if err == nil {
			offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		}
		if sum == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s committed %d of %d offsets within %s (%v)", group, sum, total, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// offsetsReport lists each partition's end offset and the group's committed offset, for a failure.
func offsetsReport(t *testing.T, brokers []string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(context.Background(), "order.paid")
	if err != nil {
		return err.Error()
	}
	offs, _ := adm.FetchOffsets(context.Background(), "benefits")
	groups, _ := adm.DescribeGroups(context.Background(), "benefits")
	var b strings.Builder
	ends.Each(func(o kadm.ListedOffset) {
		c, _ := offs.Lookup("order.paid", o.Partition)
		fmt.Fprintf(&b, "p%d end %d committed %d; ", o.Partition, o.Offset, c.At)
	})
	for _, g := range groups {
		fmt.Fprintf(&b, "group %s state %s members %d", g.Group, g.State, len(g.Members))
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); ok {
				fmt.Fprintf(&b, " [%s %v]", m.MemberID, a.Topics)
			}
		}
	}
	return b.String()
}

func kadmClient(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
