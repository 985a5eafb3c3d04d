package rmqpush_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
	"github.com/outboxd/outboxd/consumer/rmqpush"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

const childNSEnv = "RMQPUSH_TEST_CHILD_NAMESERVER"

func TestMain(m *testing.M) {
	if ns := os.Getenv(childNSEnv); ns != "" {
		os.Exit(runChild(ns, os.Getenv("RMQPUSH_TEST_CHILD_DSN")))
	}
	os.Exit(m.Run())
}

// runChild is a consumer process: the push consumer with the kit, granting benefit order N for
// event ev-N, a few milliseconds each, until it is killed.
func runChild(ns, dsn string) int {
	kit, err := kittest.OpenKit(dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fn := func(ctx context.Context, tx *sql.Tx, m consumer.Message) error {
		n, err := strconv.Atoi(strings.TrimPrefix(m.EventID, "ev-"))
		if err != nil {
			return consumer.Permanent(err)
		}
		time.Sleep(3 * time.Millisecond)
		return kittest.Grant(n)(ctx, tx, m)
	}
	c, err := rmqconsumer.NewPushConsumer(rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqconsumer.WithGroupName("benefits"), rmqconsumer.WithInstance(fmt.Sprintf("kill-test-%d", os.Getpid())),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset))
	if err == nil {
		err = c.Subscribe("ORDER_PAID", rmqconsumer.MessageSelector{}, rmqpush.Listener(kit, fn, rmqpush.Options{
			Handled: func(m consumer.Message, o consumer.Outcome) {
				if o == consumer.Duplicate {
					fmt.Println("DUPLICATE", m.EventID)
				}
			}}))
	}
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("STARTED")
	select {}
}

// Push consumer processes killed -9 while they grant benefits: the broker drops a killed
// client from its group when its connection closes, the next process resumes from the offsets
// committed so far, and the messages handled but not yet committed come again as duplicates.
// At the end every event has exactly one benefit, and marks and benefits match one to one.
func TestPushConsumerKilled(t *testing.T) {
	d := kittest.New(t)
	mq, err := rocketmq.Start(rocketmq.Options{Topics: []string{"ORDER_PAID"}, Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	p, err := producer.NewDefaultProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{mq.NameServer()})),
		producer.WithRetry(0), producer.WithInstanceName(fmt.Sprintf("kill-test-p-%d", os.Getpid())), producer.WithGroupName("kill-test-producer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	const n = 300
	for i := range n {
		m := primitive.NewMessage("ORDER_PAID", []byte("{}"))
		m.WithProperty("event_id", fmt.Sprintf("ev-%d", i))
		if res, err := p.SendSync(t.Context(), m); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send: %v %v", res, err)
		}
	}

	benefits := func() int { return d.Count(t, "SELECT COUNT(*) FROM benefit") }
	waitFor := func(min int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for benefits() < min {
			if time.Now().After(deadline) {
				t.Fatalf("%d benefits within 30s, want %d", benefits(), min)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dups := int64(0)
	for _, upTo := range []int{60, 150, 230} {
		child := startChild(t, mq.NameServer(), d.DSN)
		waitFor(upTo)
		child.kill(t)
		dups += child.dups.Load()
	}
	child := startChild(t, mq.NameServer(), d.DSN)
	waitFor(n)
	time.Sleep(500 * time.Millisecond) // room for a wrong extra grant
	child.kill(t)
	dups += child.dups.Load()
	t.Logf("%d redeliveries after kills were acked as duplicates", dups)

	checks := map[string]int{
		"SELECT COUNT(*) FROM benefit":                                   n,
		"SELECT COUNT(*) FROM consumed_event WHERE status = 'PROCESSED'": n,
		"SELECT COUNT(*) FROM consumed_event c JOIN benefit b ON b.event_id = c.event_id AND b.order_id = CAST(SUBSTRING(c.event_id, 4) AS UNSIGNED)": n,
		"SELECT COUNT(*) FROM quarantined_event": 0,
	}
	for q, want := range checks {
		if got := d.Count(t, q); got != want {
			t.Errorf("%s: %d, want %d", q, got, want)
		}
	}
}

type childProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	dups *atomic.Int64
}

func startChild(t *testing.T, ns, dsn string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childNSEnv+"="+ns, "RMQPUSH_TEST_CHILD_DSN="+dsn)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, done: make(chan struct{}), dups: &atomic.Int64{}}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "STARTED" || strings.HasPrefix(l, "ERROR"):
				started <- l
			case strings.HasPrefix(l, "DUPLICATE"):
				c.dups.Add(1)
			}
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	select {
	case l := <-started:
		if l != "STARTED" {
			t.Fatalf("consumer process: %s", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("consumer process did not start within 30s")
	}
	return c
}

func (c *childProc) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}
