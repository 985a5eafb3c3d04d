package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// One source transaction 40 times transactions.max_events and 20 times the in-flight limit,
// under exactly-once: it is never split across Kafka transactions (one commit carries all of
// it, and the checkpoint after it), never fails for its size, and arrives once, in order.
func TestExactlyOnceLargeSourceTransaction(t *testing.T) {
	const rows = 20_000
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - sink: main\n    topic: t\n"
	admin := admFreeAddr(t)
	o.Extra = fmt.Sprintf("admin: {listen: %q}\npipeline: {max_inflight_events: 1000}\ntransactions: {max_events: 500}\n", admin)
	useKafkaStore(t, kc, &o, "big")
	startRelay(t, o, daemon.Options{Version: "e2e-test"})
	admWaitReady(t, admin, http.StatusOK, 20*time.Second)

	committedTxns := func() float64 {
		t.Helper()
		code, body := admGet(admin, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		v, ok := metricValue(fams, "outboxd_kafka_transactions_total", map[string]string{"result": "committed"})
		if !ok {
			t.Fatal("no outboxd_kafka_transactions_total{result=committed}")
		}
		return v
	}
	// Idle: the start position's commit is done; nothing else commits without rows.
	before := committedTxns()

	batch := make([]row, rows)
	ids := make([]string, rows)
	for i := range batch {
		ids[i] = fmt.Sprintf("big%05d", i)
		p, _ := json.Marshal(eoPayload{ID: ids[i], Key: "k", Seq: i})
		batch[i] = row{EventID: ids[i], Key: "k", Topic: "t", Payload: p}
	}
	if _, err := commitOne(context.Background(), w, batch...); err != nil {
		t.Fatal(err)
	}
	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rb := readBackCommitted(t, rd, kc.ListenAddrs()[0], ids, 60*time.Second, payloadSeq(t))
	if rb.franz.Duplicates != 0 || rb.kcat.Duplicates != 0 {
		t.Fatalf("duplicates: franz-go %d, kcat %d", rb.franz.Duplicates, rb.kcat.Duplicates)
	}
	// The commit that made the rows visible is the one that carried all of them: one source
	// transaction, one Kafka transaction (max_events splits only at source boundaries; split
	// at max_events it would take 40). A second commit may follow for a transaction without
	// outbox rows (a heartbeat's), which checkpoint.interval commits.
	if n := committedTxns() - before; n < 1 || n > 2 {
		t.Fatalf("%v Kafka transactions committed for one source transaction of %d rows (max_events 500), want 1", n, rows)
	}
}
