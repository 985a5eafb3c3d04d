package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// The README's Operations section, through the binary: a config change (here a route) is not
// read while outboxd runs, SIGHUP included; a restart applies it to every row after the
// checkpoint, among them one that was in flight at the stop, while no delivered row is sent
// again; and the checkpoint carries across binaries as `checkpoint show` then `checkpoint set`.
func TestRouteChangeNeedsARestart(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "old", "new", "moved")
	o, _ := lcCfg(t, w, kc.ListenAddrs()[0])
	route := func(topic string) { o.Routes = "  - sink: main\n    topic: " + topic + "\n" }
	route("old")
	cfg := writeCfg(t, o)
	commit := func(id string) string {
		return w.commit(row{EventID: id, Key: "k", Topic: "t", Payload: []byte(id)})
	}

	_, p := lcStart(t, w, o, cfg)
	waitCheckpoint(t, o.Dir, commit("r1"), 20*time.Second)
	// The file changes under the running outboxd, and SIGHUP (reload, to most daemons) follows.
	route("new")
	writeCfg(t, o)
	p.signal(t, syscall.SIGHUP)
	p.waitLog(t, "SIGHUP ignored", 5*time.Second)
	waitCheckpoint(t, o.Dir, commit("r2"), 20*time.Second)
	p.stop(t)
	commit("r3") // while stopped

	p = startBinary(t, "run", "--config", cfg) // the new route from now on
	waitCheckpoint(t, o.Dir, commit("r4"), 20*time.Second)
	p.stop(t)

	// A row in flight at the stop: its broker is down, the stop is forced (exit 3, the
	// checkpoint stays before it); the restart routes it anew.
	dead := admFreeAddr(t)
	o.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s}", dead)}
	writeCfg(t, o)
	before := w.position()
	p = startBinary(t, "run", "--config", cfg)
	g := commit("r5")
	p.waitLog(t, `"gtid":"`+g+`"`, 20*time.Second)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "send SIGINT or SIGTERM again to exit at once", 5*time.Second)
	// The same signal within 500 ms of the first is taken for one signal delivered twice
	// (GNU timeout signals the process and its group): an operator's second one comes later.
	time.Sleep(600 * time.Millisecond)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d after a second SIGTERM, want 3:\n%s", code, p.output())
	}
	if got := readCheckpoint(t, o.Dir); got != before {
		t.Fatalf("checkpoint %q after the forced stop, want %q (before r5)", got, before)
	}
	o.Sinks = map[string]string{"main": kafkaSink(kc)}
	route("moved")
	writeCfg(t, o)
	p = startBinary(t, "run", "--config", cfg)
	waitCheckpoint(t, o.Dir, g, 20*time.Second)
	p.stop(t)

	// Upgrade or roll back across a checkpoint format change: show with one binary, set with
	// the other (here the same one), with the config from OUTBOXD_CONFIG.
	env := []string{"OUTBOXD_CONFIG=" + cfg}
	code, out, errOut := runSplit(t, env, "checkpoint", "show")
	var shown struct {
		GTIDSet string `json:"gtid_set"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.GTIDSet != g {
		t.Fatalf("checkpoint show: exit %d, %v, gtid_set %q, want %q:\n%s%s", code, err, shown.GTIDSet, g, out, errOut)
	}
	if err := os.Remove(o.Dir + "/checkpoint.json"); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runSplit(t, env, "checkpoint", "set", "--gtid", shown.GTIDSet); code != 0 {
		t.Fatalf("checkpoint set: exit %d:\n%s%s", code, out, errOut)
	}
	p = startBinary(t, "run", "--config", cfg)
	waitCheckpoint(t, o.Dir, commit("r6"), 20*time.Second)
	p.stop(t)

	for topic, want := range map[string]string{"old": "r1 r2", "new": "r3 r4", "moved": "r5 r6"} {
		c := newConsumer(t, kc, topic)
		c.waitFor(len(strings.Fields(want)), 20*time.Second)
		got := strings.Join(eventIDs(c.settle(500*time.Millisecond)), " ")
		if got != want {
			t.Errorf("topic %s holds %q, want %q", topic, got, want)
		}
	}
}

// Changing the outbox table while outboxd runs (FULL row metadata, the default server here): a
// column added before the configured ones, and an optional column dropped, are followed without
// a restart; each row is read with the columns it was written with.
func TestOutboxTableAlteredWhileRunning(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	startRelay(t, simpleCfg(t, w, kc, w.position()), daemon.Options{})
	c := newConsumer(t, kc, "t")

	// One key, so the three land on one partition and their order is the commit order.
	w.commit(row{EventID: "before", Key: "k1", Topic: "t", EventType: str("A"), Payload: []byte("p1")})
	w.exec("ALTER TABLE " + w.schema + ".outbox_event ADD COLUMN trace_id VARCHAR(32) NULL AFTER event_id")
	w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, trace_id, biz_key, topic, event_type, payload) VALUES (?,?,?,?,?,?)",
		"added", "trace-1", "k1", "t", "B", "p2")
	w.exec("ALTER TABLE " + w.schema + ".outbox_event DROP COLUMN event_type")
	w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, biz_key, topic, payload) VALUES (?,?,?,?)", "dropped", "k1", "t", "p3")

	var got []string
	for _, r := range c.waitForEvent("dropped", 20*time.Second) {
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", header(r, "event_id"), r.Key, header(r, "event_type"), r.Value))
	}
	if want := "[before/k1/A/p1 added/k1/B/p2 dropped/k1//p3]"; fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// An outbox table added to the config is relayed from the checkpoint on: its rows committed
// before the checkpoint are not sent (a replay with --from-gtid would send them, with the other
// tables' rows again), its rows committed after it, even while outboxd was down, are.
func TestAddedOutboxTableStartsAtTheCheckpoint(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(fmt.Sprintf(strings.Replace(outboxDDL, "outbox_event", "billing_outbox", 1), w.schema))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	r := startRelay(t, o, daemon.Options{})
	w.commitTo("billing_outbox", row{EventID: "b-early", Key: "k", Topic: "t", Payload: []byte("1")})
	waitCheckpoint(t, o.Dir, w.commit(row{EventID: "o1", Key: "k", Topic: "t", Payload: []byte("2")}), 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	w.commitTo("billing_outbox", row{EventID: "b-down", Key: "k", Topic: "t", Payload: []byte("3")})

	// A checkpoint covers the tables it was written for: the config with one more is refused,
	// naming it, until the operator records the new list at a position of their choosing (the
	// checkpoint's own here, which b-down comes after).
	o.Tables = append(o.Tables, w.schema+".billing_outbox")
	r = startRelay(t, o, daemon.Options{})
	select {
	case err := <-r.done:
		close(r.done) // for the cleanup's stop
		if err == nil || !strings.Contains(err.Error(), "tables added: "+w.schema+".billing_outbox") {
			t.Fatalf("run with an added table: %v, want a refusal naming it", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run with an added table did not stop")
	}
	if code, out := runBinary(t, "checkpoint", "set", "--config", writeCfg(t, o), "--from-checkpoint"); code != 0 {
		t.Fatalf("checkpoint set --from-checkpoint: exit %d:\n%s", code, out)
	}
	startRelay(t, o, daemon.Options{})
	w.commitTo("billing_outbox", row{EventID: "b-late", Key: "k", Topic: "t", Payload: []byte("4")})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("b-late", 20*time.Second)
	if got := strings.Join(eventIDs(c.settle(500*time.Millisecond)), " "); got != "o1 b-down b-late" {
		t.Fatalf("delivered %q, want o1 b-down b-late", got)
	}
}
