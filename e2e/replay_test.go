package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/daemon"
)

// `checkpoint set --gtid X` and `run --from-gtid X` re-deliver exactly the transactions after X.
func TestReplayFromGTID(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	cfgPath := writeCfg(t, o)

	r := startRelay(t, o, daemon.Options{})
	var gtids []string
	for i := 0; i < 10; i++ {
		gtids = append(gtids, w.commit(
			row{EventID: fmt.Sprintf("a%d", i), Key: "k", Topic: "t", Payload: []byte("x")},
			row{EventID: fmt.Sprintf("b%d", i), Key: "j", Topic: "t", Payload: []byte("y")}))
	}
	c := newConsumer(t, kc, "t")
	c.waitFor(20, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := readCheckpoint(t, o.Dir); got != gtids[9] {
		t.Fatalf("checkpoint %q after graceful stop, want %q", got, gtids[9])
	}

	// checkpoint set while nothing runs, then run: transactions 6..9 again, nothing else.
	code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", gtids[5])
	if code != 0 {
		t.Fatalf("checkpoint set exited %d:\n%s", code, out)
	}
	code, out = runBinary(t, "checkpoint", "show", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, `"gtid_set": "`+gtids[5]+`"`) {
		t.Fatalf("checkpoint show exited %d:\n%s", code, out)
	}
	before := len(c.got)
	r = startRelay(t, o, daemon.Options{})
	c.waitFor(before+8, 20*time.Second)
	rs := c.settle(500 * time.Millisecond)[before:]
	want := "[a6 b6 a7 b7 a8 b8 a9 b9]"
	if got := fmt.Sprint(sortedByCommit(rs)); got != want {
		t.Fatalf("after checkpoint set: got %s, want %s", got, want)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// run --from-gtid ignores the checkpoint: transactions 3..9 again.
	before = len(c.got)
	r = startRelay(t, o, daemon.Options{FromGTID: gtids[2]})
	c.waitFor(before+14, 20*time.Second)
	rs = c.settle(500 * time.Millisecond)[before:]
	if got := len(rs); got != 14 {
		t.Fatalf("--from-gtid re-delivered %d, want 14: %v", got, eventIDs(rs))
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := readCheckpoint(t, o.Dir); got != gtids[9] {
		t.Fatalf("checkpoint after replay %q, want %q", got, gtids[9])
	}

	// A set that lacks a domain the server has is refused unless --force.
	code, out = runBinary(t, "run", "--config", cfgPath, "--from-gtid", "7-7-1")
	if code == 0 || !strings.Contains(out, "--force") || !strings.Contains(out, "domains 0") {
		t.Fatalf("a set without domain 0 was not refused (exit %d):\n%s", code, out)
	}
	// The lock keeps checkpoint set away from a running outboxd.
	r = startRelay(t, o, daemon.Options{})
	time.Sleep(300 * time.Millisecond)
	code, out = runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", gtids[0])
	if code == 0 || !strings.Contains(out, "lock") {
		t.Fatalf("checkpoint set succeeded while outboxd runs (exit %d):\n%s", code, out)
	}
	_ = r
}

// sortedByCommit lists event ids "<letter><n>" in commit order (by n, then letter): across
// partitions arrival order is not commit order, so the check sorts and checkPerKeyOrder does
// the per-key part.
func sortedByCommit(rs []*kgo.Record) []string {
	ids := eventIDs(rs)
	sort.Slice(ids, func(i, j int) bool {
		if ids[i][1:] != ids[j][1:] {
			return ids[i][1:] < ids[j][1:]
		}
		return ids[i] < ids[j]
	})
	return ids
}
