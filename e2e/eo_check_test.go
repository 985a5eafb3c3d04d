package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// `check` on an exactly-once config creates the checkpoint topic as it must be (compacted, one
// partition) and then passes; a checkpoint topic with cleanup.policy=delete (retention would
// one day drop the checkpoint: a lost checkpoint, never guessed) fails check with the fix.
func TestCheckExactlyOnceCheckpointTopic(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	o.Extra = "delivery: exactly_once\n"
	o.Checkpoint = "store: kafka, name: chk, sink: main, topic: made_by_check"
	code, out := runBinary(t, "check", "--config", writeCfg(t, o))
	if code != 0 {
		t.Fatalf("check exited %d:\n%s", code, out)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, "made_by_check")
	if err != nil || td["made_by_check"].Err != nil {
		t.Fatalf("check did not create the checkpoint topic: %v %v\n%s", err, td["made_by_check"].Err, out)
	}
	if n := len(td["made_by_check"].Partitions); n != 1 {
		t.Fatalf("checkpoint topic has %d partitions, want 1", n)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "made_by_check")
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rc[0].Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("checkpoint topic cleanup.policy %q, want compact", policy)
	}

	if err := kc.CreateTopic("deleting", 1, map[string]string{"cleanup.policy": "delete"}); err != nil {
		t.Fatal(err)
	}
	o.Dir = t.TempDir()
	o.Checkpoint = "store: kafka, name: chk, sink: main, topic: deleting"
	code, out = runBinary(t, "check", "--config", writeCfg(t, o))
	if code == 0 || !strings.Contains(out, "compact") {
		t.Fatalf("check on a delete-policy checkpoint topic: exit %d, want a failure naming cleanup.policy=compact:\n%s", code, out)
	}
	t.Log(firstLineWith(out, "deleting"))
}

// firstLineWith is the first line of out that contains s, for the log.
func firstLineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return fmt.Sprintf("(no line with %q)", s)
}
