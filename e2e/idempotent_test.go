package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/kafkafault"
)

// lostAnswersRun relays rows while the broker stores some produce requests but their answers
// are lost, and returns how many records the topic holds twice. Per-key order and no loss are
// checked either way.
func lostAnswersRun(t *testing.T, idempotent bool) (dups int) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 1s, idempotent: %t}", kc.ListenAddrs()[0], idempotent)}
	o.Routes = "  - sink: main\n    topic: t\n"
	startRelay(t, o, daemon.Options{})
	c := newConsumer(t, kc, "t")
	w.commit(row{EventID: "warm", Key: "k0", Topic: "t", Payload: []byte("0")})
	c.waitForEvent("warm", 30*time.Second)

	lost, stop, err := kafkafault.LoseAnswers(kc, "t", 3, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	committed := []string{"warm"}
	for i := range 400 {
		id := fmt.Sprintf("e%d", i)
		w.commit(row{EventID: id, Key: fmt.Sprintf("k%d", i%10), Topic: "t", Payload: []byte(id)})
		committed = append(committed, id)
		time.Sleep(10 * time.Millisecond)
	}
	c.waitForEvent("e399", 60*time.Second)
	rs := c.settle(2 * time.Second)
	if lost.Load() == 0 {
		t.Fatal("no answer was lost: the test exercised nothing")
	}
	checkPerKeyOrder(t, rs, committed)
	return len(rs) - len(committed)
}

// The broker stores a batch but its answer is lost, three times while rows flow: the
// idempotent producer's resend is recognised by the broker, so the topic holds every event
// once, per key in commit order.
func TestIdempotentLostAnswersNoDuplicate(t *testing.T) {
	if dups := lostAnswersRun(t, true); dups != 0 {
		t.Errorf("idempotent: %d records stored twice", dups)
	}
}

// The same run with idempotent: false stores duplicates: the test can see them.
func TestNotIdempotentLostAnswersDuplicate(t *testing.T) {
	if dups := lostAnswersRun(t, false); dups == 0 {
		t.Error("idempotent: false stored no duplicate: the test cannot see them")
	}
}

// A cluster that refuses the idempotent producer id (ACLs without IDEMPOTENT_WRITE, brokers
// before 2.8): check reports the sink with the permission and the setting to change; with
// idempotent: false the same cluster checks clean.
func TestCheckIdempotentWriteRefused(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	kc.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	code, out, errOut := runSplit(t, []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}, "check", "--json")
	r := parseCheck(t, out)
	p := hasItem(r.Problems, "sink", "sinks.main")
	if code == 0 || p == nil || !strings.Contains(p.Message, "IDEMPOTENT_WRITE") || !strings.Contains(p.Fix, "sinks.main.idempotent: false") {
		t.Fatalf("check: exit %d, problems %+v, want sinks.main with IDEMPOTENT_WRITE and the setting\n%s", code, r.Problems, errOut)
	}
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, idempotent: false}", kc.ListenAddrs()[0])}
	code, out, errOut = runSplit(t, []string{"OUTBOXD_CONFIG=" + writeCfg(t, o)}, "check", "--json")
	if r = parseCheck(t, out); code != 0 || len(r.Problems) != 0 {
		t.Fatalf("idempotent: false: exit %d, problems %+v\n%s", code, r.Problems, errOut)
	}
}
