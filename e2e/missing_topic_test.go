package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// metricValue returns the value of the series of family name whose labels include want, and
// whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

func createKafkaTopic(t *testing.T, c *kfake.Cluster, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// A row for a Kafka topic that does not exist yet stalls its key (not the others), shows in
// /readyz, the metrics and one log line naming the topic, and is delivered in key order once
// the topic is created; later rows follow.
func TestKafkaTopicCreatedLater(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "present")
	admin := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.MissingTopicTimeout = "2m"
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	r := startRelay(t, o, daemon.Options{})
	admWaitReady(t, admin, http.StatusOK, 20*time.Second)

	var committed []string
	add := func(id, key, topic string) {
		w.commit(row{EventID: id, Key: key, Topic: topic, Payload: []byte(id)})
		committed = append(committed, id)
	}
	add("late1", "k1", "late")
	add("other1", "k2", "present")
	add("late2", "k1", "late")
	add("same-key-other-topic", "k1", "present") // Kafka orders a key within a topic only

	body := admWaitReady(t, admin, http.StatusServiceUnavailable, 20*time.Second)
	if !strings.Contains(body, "topic late does not exist") || !strings.Contains(body, "sink main") {
		t.Fatalf("/readyz does not name the missing topic: %s", body)
	}
	pc := newConsumer(t, kc, "present")
	pc.waitForEvent("other1", 20*time.Second) // another key is not held
	time.Sleep(1500 * time.Millisecond)       // several retries (backoff max 200ms)
	_, fams := admScrape(t, admin)
	if v, ok := metricValue(fams, "outboxd_topic_missing", map[string]string{"sink": "main", "topic": "late"}); !ok || v != 1 {
		t.Errorf("outboxd_topic_missing{topic=late} = %v (present %v), want 1", v, ok)
	}
	if v, _ := metricValue(fams, "outboxd_events_failed_total", map[string]string{"sink": "main", "kind": "topic_missing"}); v < 3 {
		t.Errorf("outboxd_events_failed_total{kind=topic_missing} = %v, want several retries", v)
	}
	if v, _ := metricValue(fams, "outboxd_sink_up", map[string]string{"sink": "main"}); v != 1 {
		t.Errorf("outboxd_sink_up = %v: a broker that answers 'no such topic' is up", v)
	}
	// outboxd status says what /readyz says: not "kafka up" while the topic is missing.
	if code, out := runBinary(t, "status", "--addr", admin); code != 0 || strings.Contains(out, "kafka up") ||
		!strings.Contains(out, "sink main    kafka NOT READY: topic late does not exist") {
		t.Errorf("outboxd status while topic late is missing: exit %d:\n%s", code, out)
	}
	if n := strings.Count(r.logText(), "topic late does not exist on sink main"); n != 1 {
		t.Errorf("the missing topic was logged %d times, want once (not per retry):\n%s", n, r.logText())
	}
	for _, rec := range pc.got {
		if id := header(rec, "event_id"); id == "late1" || id == "late2" {
			t.Fatalf("%s arrived before its topic existed", id)
		}
	}

	createKafkaTopic(t, kc, "late")
	lc := newConsumer(t, kc, "late")
	lc.waitForEvent("late2", 30*time.Second)
	add("late3", "k1", "late")
	add("other2", "k2", "present")
	lc.waitForEvent("late3", 20*time.Second)
	pc.waitForEvent("other2", 20*time.Second)
	checkPerKeyOrder(t, append(lc.settle(500*time.Millisecond), pc.settle(500*time.Millisecond)...), committed)
	admWaitReady(t, admin, http.StatusOK, 20*time.Second)
	_, fams = admScrape(t, admin)
	if _, ok := metricValue(fams, "outboxd_topic_missing", map[string]string{"topic": "late"}); ok {
		t.Errorf("outboxd_topic_missing{topic=late} still exported after delivery")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got, want := readCheckpoint(t, o.Dir), w.position(); got != want {
		t.Fatalf("checkpoint %q, want %q", got, want)
	}
}

// A topic that is never created: after retry.missing_topic_timeout the row follows on_poison,
// dead-lettered (and later rows go on) or stopping outboxd with the way out; --dead-letter-event
// diverts a row waiting for its topic at once.
func TestKafkaTopicNeverCreated(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.created", "outbox.dead_letter", "diverted")
	base := simpleCfg(t, w, kc, w.position())
	good := w.commit(row{EventID: "ok1", Key: "k", Topic: "order.created", Payload: []byte("1")})
	bad := w.commit(row{EventID: "typo1", Key: "k", Topic: "order.craeted", Payload: []byte("2")})
	w.commit(row{EventID: "ok2", Key: "k", Topic: "order.created", Payload: []byte("3")})

	t.Run("dead_letter", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.OnPoison, o.DeadLetter = "dead_letter", "{sink: main, topic: outbox.dead_letter}"
		o.MissingTopicTimeout = "1500ms"
		began := time.Now()
		startRelay(t, o, daemon.Options{})
		dl := newConsumer(t, kc, "outbox.dead_letter")
		rec := dl.waitForEvent("typo1", 30*time.Second)[0]
		if waited := time.Since(began); waited < 1500*time.Millisecond {
			t.Fatalf("dead-lettered after %s, before the timeout", waited)
		}
		if reason := header(rec, "outbox_dead_letter_reason"); !strings.Contains(reason, "order.craeted") || !strings.Contains(reason, "retry.missing_topic_timeout") {
			t.Errorf("dead letter reason %q does not name the topic and the timeout (headers %v)", reason, rec.Headers)
		}
		oc := newConsumer(t, kc, "order.created")
		oc.waitForEvent("ok2", 20*time.Second)
		waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)
	})
	t.Run("stop", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.MissingTopicTimeout = "1s"
		code, out := runBinary(t, "run", "--config", writeCfg(t, o))
		if code == 0 {
			t.Fatalf("outboxd exited 0 although the topic never appeared:\n%s", out)
		}
		for _, want := range []string{"order.craeted", "typo1", bad, "retry.missing_topic_timeout", "--dead-letter-event typo1"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if got := readCheckpoint(t, o.Dir); got != good {
			t.Fatalf("checkpoint %q, want %q (before the row whose topic is missing)", got, good)
		}
	})
	t.Run("missing dead-letter topic stops", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.OnPoison, o.DeadLetter = "dead_letter", "{sink: main, topic: outbox.dead_letetr}"
		o.MissingTopicTimeout = "1s"
		code, out := runBinary(t, "run", "--config", writeCfg(t, o))
		if code == 0 {
			t.Fatalf("outboxd exited 0 although the dead-letter topic does not exist:\n%s", out)
		}
		for _, want := range []string{"dead-letter topic outbox.dead_letetr", "typo1", "create it"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if got := readCheckpoint(t, o.Dir); got != good {
			t.Fatalf("checkpoint %q, want %q (before the row whose dead letter was never stored)", got, good)
		}
	})
	t.Run("dead-letter-event diverts at once", func(t *testing.T) {
		o := base
		o.Dir = t.TempDir()
		o.DeadLetter = "{sink: main, topic: diverted}" // not the topic of the dead_letter subtest
		o.MissingTopicTimeout = "1h"
		admin := admFreeAddr(t)
		o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
		cfgPath := writeCfg(t, o)
		p := startBinary(t, "run", "--config", cfgPath)
		var code int
		var body string
		admWaitFor(t, 30*time.Second, func() string { return fmt.Sprintf("/readyz %d: %s", code, body) }, func() bool {
			code, body = admGet(admin, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "topic order.craeted does not exist")
		})
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.wait(t, 60*time.Second)
		if got := readCheckpoint(t, o.Dir); got == w.position() {
			t.Fatalf("checkpoint %q passes the waiting row", got)
		}

		began := time.Now()
		p = startBinary(t, "run", "--config", cfgPath, "--dead-letter-event", "typo1")
		dl := newConsumer(t, kc, "diverted")
		dl.waitForEvent("typo1", 30*time.Second)
		if waited := time.Since(began); waited > 20*time.Second {
			t.Fatalf("diverted after %s: not at once", waited)
		}
		audit, err := os.ReadFile(filepath.Join(o.Dir, "audit.log"))
		if err != nil || !strings.Contains(string(audit), `"typo1"`) || !strings.Contains(string(audit), "--dead-letter-event") ||
			!strings.Contains(string(audit), "order.craeted") {
			t.Fatalf("audit.log = %q, %v", audit, err)
		}
		waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)
	})
}

// The RocketMQ equivalents: a topic without a route waits and is delivered once the topic
// is created; one never created is dead-lettered after the timeout.
func TestRocketMQTopicCreatedLaterOrNever(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"present", "dead"}})
	admin := admFreeAddr(t)
	o := rmqCfg(t, w, rc, "  - sink: rmq\n    topic: \"{topic}\"\n")
	o.OnPoison, o.DeadLetter = "dead_letter", "{sink: rmq, topic: dead}"
	o.MissingTopicTimeout = "4s"
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", admin)
	r := startRelay(t, o, daemon.Options{})
	admWaitReady(t, admin, http.StatusOK, 20*time.Second)

	committed := []string{"late1", "other1", "late2"}
	keyOf := map[string]string{"late1": "k1", "other1": "k2", "late2": "k1", "late3": "k1"}
	w.commit(row{EventID: "late1", Key: "k1", Topic: "late", Payload: []byte("1")})
	w.commit(row{EventID: "other1", Key: "k2", Topic: "present", Payload: []byte("2")})
	w.commit(row{EventID: "late2", Key: "k1", Topic: "late", Payload: []byte("3")})
	body := admWaitReady(t, admin, http.StatusServiceUnavailable, 20*time.Second)
	if !strings.Contains(body, "topic late does not exist") {
		t.Fatalf("/readyz does not name the missing topic: %s", body)
	}
	waitRMQ(t, rc, "present", 1, 20*time.Second)
	if n := len(rc.Messages("late")); n != 0 {
		t.Fatalf("%d messages stored in topic late before it existed", n)
	}
	rc.CreateTopic("late", 4)
	ms := waitRMQ(t, rc, "late", 2, 30*time.Second)
	w.commit(row{EventID: "late3", Key: "k1", Topic: "late", Payload: []byte("4")})
	committed = append(committed, "late3")
	ms = waitRMQ(t, rc, "late", 3, 20*time.Second)
	checkRMQKeyOrder(t, append(ms, rc.Messages("present")...), committed, keyOf)
	admWaitReady(t, admin, http.StatusOK, 20*time.Second)
	if n := strings.Count(r.logText(), "topic late does not exist on sink rmq"); n != 1 {
		t.Errorf("the missing topic was logged %d times, want once", n)
	}

	// Never created: dead-lettered after the timeout, later rows go on.
	w.commit(row{EventID: "typo1", Key: "k3", Topic: "nowhere", Payload: []byte("5")})
	w.commit(row{EventID: "other2", Key: "k3", Topic: "present", Payload: []byte("6")})
	dl := waitRMQ(t, rc, "dead", 1, 30*time.Second)
	if dl[0].Keys != "typo1" {
		t.Fatalf("dead letter %q, want typo1", dl[0].Keys)
	}
	waitRMQ(t, rc, "present", 2, 20*time.Second)
	_, fams := admScrape(t, admin)
	if v, _ := metricValue(fams, "outboxd_dead_letters_total", map[string]string{"reason": "topic_missing"}); v != 1 {
		t.Errorf("outboxd_dead_letters_total{reason=topic_missing} = %v, want 1", v)
	}
	waitCheckpoint(t, o.Dir, w.position(), 20*time.Second)
}
