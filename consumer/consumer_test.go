package consumer_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
)

// The child mode of TestKilledBetweenWorkAndCommit: this test binary, re-executed, handles one
// message whose work writes the benefit row, says so on stdout and then blocks inside the
// transaction until the parent kills it with SIGKILL.
const childEnv = "CONSUMER_TEST_CHILD_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(childEnv); dsn != "" {
		os.Exit(runChild(dsn, os.Getenv("CONSUMER_TEST_CHILD_EVENT"), os.Getenv("CONSUMER_TEST_CHILD_STAGE")))
	}
	os.Exit(m.Run())
}

func runChild(dsn, eventID, stage string) int {
	kit, err := kittest.OpenKit(dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx := context.Background()
	out, err := kit.Handle(ctx, consumer.Message{EventID: eventID, MsgID: "child"}, func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO benefit (order_id, event_id) VALUES (1, ?)", msg.EventID); err != nil {
			return err
		}
		if stage == "work" {
			fmt.Println("WORK DONE")
			select {} // killed here: the work is written, the transaction not committed
		}
		return nil
	})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	// Committed but not acked: the ack (an offset commit) would come now.
	fmt.Println("COMMITTED", out)
	select {}
}

func newFixture(t *testing.T) *kittest.DB { return kittest.New(t) }

var grant = kittest.Grant

func TestDuplicatesRunTheFunctionOnce(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var runs atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		runs.Add(1)
		return grant(7)(ctx, tx, msg)
	}
	msg := consumer.Message{EventID: "ev-7", MsgID: "t/0@3"}
	var outcomes []consumer.Outcome
	for range 3 {
		out, err := f.Kit.Handle(ctx, msg, fn)
		if err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, out)
	}
	if fmt.Sprint(outcomes) != "[processed duplicate duplicate]" || runs.Load() != 1 {
		t.Fatalf("outcomes %v, function ran %d times; want [processed duplicate duplicate] and once", outcomes, runs.Load())
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit"); n != 1 {
		t.Fatalf("%d benefit rows, want 1", n)
	}
	marks, err := f.Kit.Marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 1 || marks[0].EventID != "ev-7" || marks[0].Status != consumer.StatusProcessed || marks[0].MsgID != "t/0@3" ||
		time.Since(marks[0].HandledAt) > time.Minute {
		t.Fatalf("marks %+v", marks)
	}
	// Event ids compare byte for byte: a case variant is another event.
	if out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "EV-7"}, grant(8)); err != nil || out != consumer.Processed {
		t.Fatalf("EV-7: %v %v, want processed", out, err)
	}
}

// Concurrent deliveries of one event (a rebalance, a retry overtaking a slow attempt): the
// later inserts wait on the first one's row lock, so the function's work commits once; every
// delivery is eventually acked.
func TestConcurrentDuplicatesCommitOnce(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var runs, committed atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		runs.Add(1)
		time.Sleep(200 * time.Millisecond) // hold the mark's lock while the others arrive
		return grant(9)(ctx, tx, msg)
	}
	var wg sync.WaitGroup
	var lockErrs atomic.Int64
	for range 6 {
		wg.Go(func() {
			for { // redelivery until acked, as an adapter does
				out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-9"}, fn)
				if err == nil {
					if out == consumer.Processed {
						committed.Add(1)
					}
					return
				}
				if !consumer.IsLockConflict(err) {
					t.Errorf("handle: %v", err)
					return
				}
				lockErrs.Add(1)
			}
		})
	}
	wg.Wait()
	if committed.Load() != 1 || f.Count(t, "SELECT COUNT(*) FROM benefit") != 1 {
		t.Fatalf("%d deliveries committed the work (function ran %d times), want 1", committed.Load(), runs.Load())
	}
	t.Logf("function ran %d times for 6 concurrent deliveries; %d lock conflicts redelivered", runs.Load(), lockErrs.Load())
}

func TestPermanentErrorRecordsRejectedAndAcks(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	bad := errors.New("order 5 does not exist")
	var runs atomic.Int64
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		runs.Add(1)
		if err := grant(5)(ctx, tx, msg); err != nil { // written, then undone
			return err
		}
		return consumer.Permanent(fmt.Errorf("grant: %w", bad))
	}
	msg := consumer.Message{EventID: "ev-5", MsgID: "q1@4", Topic: "order.paid", Key: []byte("alice"),
		Payload: []byte(`{"order_id":5}`), Headers: []consumer.Header{{Key: "event_type", Value: []byte("OrderPaid")}, {Key: "bin", Value: []byte{0xff, 0}}}}
	out, err := f.Kit.Handle(ctx, msg, fn)
	if err != nil || out != consumer.Rejected {
		t.Fatalf("handle: %v %v, want rejected and nil (ack)", out, err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit"); n != 0 {
		t.Fatalf("the rejected event's work was kept: %d benefit rows", n)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'ev-5' AND status = 'REJECTED' AND msg_id = 'q1@4'"); n != 1 {
		t.Fatal("no REJECTED mark")
	}
	var topic, key, payload, headers, why string
	if err := f.DB.QueryRow("SELECT topic, msg_key, payload, headers, error FROM quarantined_event WHERE event_id = 'ev-5'").
		Scan(&topic, &key, &payload, &headers, &why); err != nil {
		t.Fatal(err)
	}
	if topic != "order.paid" || key != "alice" || payload != `{"order_id":5}` ||
		headers != `{"bin":"base64:/wA=","event_type":"OrderPaid"}` || why != "permanent: grant: order 5 does not exist" {
		t.Fatalf("quarantine row: %q %q %q %q %q", topic, key, payload, headers, why)
	}
	// The redelivery is a duplicate: acked, not retried forever.
	if out, err := f.Kit.Handle(ctx, msg, fn); err != nil || out != consumer.Duplicate || runs.Load() != 1 {
		t.Fatalf("redelivery: %v %v (function ran %d times), want duplicate", out, err, runs.Load())
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM quarantined_event"); n != 1 {
		t.Fatalf("%d quarantine rows, want 1", n)
	}
}

func TestTransientErrorLeavesNoMarkAndIsRedelivered(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	down := errors.New("benefit service unavailable")
	attempts := 0
	fn := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		attempts++
		if err := grant(3)(ctx, tx, msg); err != nil {
			return err
		}
		if attempts < 3 {
			return down
		}
		return nil
	}
	msg := consumer.Message{EventID: "ev-3"}
	for i := 1; i <= 2; i++ {
		out, err := f.Kit.Handle(ctx, msg, fn)
		if !errors.Is(err, down) || consumer.IsPermanent(err) {
			t.Fatalf("attempt %d: %v %v, want the transient error (no ack)", i, out, err)
		}
		if n := f.Count(t, "SELECT COUNT(*) FROM consumed_event") + f.Count(t, "SELECT COUNT(*) FROM benefit"); n != 0 {
			t.Fatalf("attempt %d left %d rows (mark or work) behind", i, n)
		}
	}
	if out, err := f.Kit.Handle(ctx, msg, fn); err != nil || out != consumer.Processed {
		t.Fatalf("redelivery: %v %v, want processed", out, err)
	}
	if f.Count(t, "SELECT COUNT(*) FROM benefit") != 1 || f.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE status = 'PROCESSED'") != 1 {
		t.Fatal("after the redelivery: want one benefit and one PROCESSED mark")
	}
}

func TestNoEventIDIsQuarantined(t *testing.T) {
	f := newFixture(t)
	ran := false
	out, err := f.Kit.Handle(t.Context(), consumer.Message{MsgID: "t/1@0", Payload: []byte("x")}, func(context.Context, *sql.Tx, consumer.Message) error {
		ran = true
		return nil
	})
	if err != nil || out != consumer.Rejected || ran {
		t.Fatalf("%v %v (ran %v), want rejected without running", out, err, ran)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM quarantined_event WHERE msg_id = 't/1@0' AND error LIKE '%no event_id%'"); n != 1 {
		t.Fatal("not quarantined")
	}
	// Too long for the dedup key, with a key too long for an index: quarantined whole.
	long := consumer.Message{EventID: strings.Repeat("e", 256), MsgID: "t/1@1", Key: []byte(strings.Repeat("k", 5000))}
	if out, err := f.Kit.Handle(t.Context(), long, grant(1)); err != nil || out != consumer.Rejected {
		t.Fatalf("long event_id: %v %v, want rejected", out, err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM quarantined_event WHERE msg_id = 't/1@1' AND LENGTH(event_id) = 256 AND LENGTH(msg_key) = 5000 AND error LIKE '%longer than 255%'"); n != 1 {
		t.Fatal("long event_id not quarantined")
	}
	if f.Count(t, "SELECT COUNT(*) FROM benefit")+f.Count(t, "SELECT COUNT(*) FROM consumed_event") != 0 {
		t.Fatal("work or mark for a message without a usable event_id")
	}
}

// A consumer process killed with SIGKILL after its work but before the commit: the server rolls
// the transaction back (work and mark), and the redelivery does the work exactly once. Killed
// after the commit but before the ack, the redelivery is a duplicate.
func TestKilledBetweenWorkAndCommit(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()

	child := startChild(t, f.DSN, "ev-1", "work")
	child.waitLine(t, "WORK DONE")
	// The work is written but not committed: invisible from here, and no mark either.
	if n := f.Count(t, "SELECT COUNT(*) FROM benefit") + f.Count(t, "SELECT COUNT(*) FROM consumed_event"); n != 0 {
		t.Fatalf("%d rows visible before the commit", n)
	}
	child.kill(t)

	// The redelivery waits (if need be) for the server to roll the dead transaction back.
	out, err := f.Kit.Handle(ctx, consumer.Message{EventID: "ev-1", MsgID: "redelivered"}, grant(1))
	if err != nil || out != consumer.Processed {
		t.Fatalf("redelivery after the kill: %v %v, want processed", out, err)
	}
	if f.Count(t, "SELECT COUNT(*) FROM benefit WHERE order_id = 1") != 1 ||
		f.Count(t, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'ev-1' AND msg_id = 'redelivered'") != 1 {
		t.Fatal("want exactly one benefit and the redelivery's mark")
	}

	// Killed after the commit, before the ack: the redelivery is acked without the work.
	if _, err := f.DB.Exec("DELETE FROM benefit"); err != nil {
		t.Fatal(err)
	}
	child = startChild(t, f.DSN, "ev-2", "commit")
	child.waitLine(t, "COMMITTED processed")
	child.kill(t)
	ran := false
	out, err = f.Kit.Handle(ctx, consumer.Message{EventID: "ev-2"}, func(context.Context, *sql.Tx, consumer.Message) error { ran = true; return nil })
	if err != nil || out != consumer.Duplicate || ran || f.Count(t, "SELECT COUNT(*) FROM benefit") != 1 {
		t.Fatalf("redelivery after commit: %v %v (ran %v), want duplicate and one benefit", out, err, ran)
	}
}

type childProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startChild(t *testing.T, dsn, eventID, stage string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dsn, "CONSUMER_TEST_CHILD_EVENT="+eventID, "CONSUMER_TEST_CHILD_STAGE="+stage)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	return c
}

func (c *childProc) waitLine(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-c.lines:
			if l == want {
				return
			}
			if strings.HasPrefix(l, "ERROR") {
				t.Fatalf("child: %s", l)
			}
		case <-c.done:
			t.Fatalf("child exited before %q", want)
		case <-timeout:
			t.Fatalf("child did not print %q within 30s", want)
		}
	}
}

func (c *childProc) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL", c.cmd.ProcessState)
	}
}
