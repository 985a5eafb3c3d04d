package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// eos is minimal with delivery: exactly_once and a valid kafka store on sink main.
const eos = minimal + `delivery: exactly_once
checkpoint: {store: kafka, name: orders, sink: main, topic: outboxd_checkpoints}
`

func TestExactlyOnceDefaults(t *testing.T) {
	c, err := parse([]byte(eos), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ExactlyOnce() || !c.Checkpoint.Kafka() || c.Checkpoint.MySQL() {
		t.Fatalf("delivery %q store %q", c.Delivery, c.Checkpoint.Store)
	}
	want := Transactions{MaxEvents: DefaultTxnMaxEvents, MaxBytes: DefaultTxnMaxBytes, Timeout: DefaultTxnTimeout}
	if c.Transactions != want || DefaultTxnMaxBytes != 64<<20 || DefaultTxnTimeout != time.Minute {
		t.Errorf("transactions %+v, want %+v", c.Transactions, want)
	}
	// No file path for the kafka store; the writer (ha lock, cleanup) defaults to the source.
	if c.Checkpoint.Path != "" || c.Checkpoint.Table != "" || c.Checkpoint.WriterAddr != "127.0.0.1:3306" || c.Checkpoint.Interval != DefaultCheckpointInterval {
		t.Errorf("checkpoint %+v", c.Checkpoint)
	}
	if got := c.TransactionalID(); got != "outboxd-orders" {
		t.Errorf("TransactionalID() = %q", got)
	}
	if got, want := c.Checkpoint.Where(), "kafka topic outboxd_checkpoints key orders on sink main"; got != want {
		t.Errorf("Where() = %q, want %q", got, want)
	}
	wantContains(t, c.String(), "delivery: exactly_once", "topic: outboxd_checkpoints", "max_events: 100000")

	c, err = parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Delivery != DeliveryAtLeastOnce || c.ExactlyOnce() || c.Transactions != (Transactions{}) {
		t.Errorf("at-least-once defaults: delivery %q transactions %+v", c.Delivery, c.Transactions)
	}
	c, err = parse([]byte(eos+"transactions: {max_events: 10, max_bytes: 1000, timeout: 2m}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Transactions{MaxEvents: 10, MaxBytes: 1000, Timeout: 2 * time.Minute}); c.Transactions != want {
		t.Errorf("transactions %+v, want %+v", c.Transactions, want)
	}
}

// Every exactly-once rule, each refused with one message that says what to change.
func TestExactlyOnceValidation(t *testing.T) {
	twoSinks := func(other string) string {
		y := strings.Replace(eos, "  main: {type: kafka, brokers: [\"127.0.0.1:9092\"]}\n",
			"  main: {type: kafka, brokers: [\"127.0.0.1:9092\", \"127.0.0.1:9093\"]}\n  other: "+other+"\n", 1)
		return strings.Replace(y, "  - sink: main\n", "  - sink: main\n  - {match: {topic: \"bill.*\"}, sink: other}\n", 1)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown delivery", minimal + "delivery: once\n", `delivery (line 13): "once" is not allowed; use at_least_once (default) or exactly_once`},
		{"misspelt delivery with the kafka store", strings.Replace(eos, "delivery: exactly_once", "delivery: exactly-once", 1),
			`delivery (line 13): "exactly-once" is not allowed; use at_least_once (default) or exactly_once`},
		{"exactly_once without kafka store", minimal + "delivery: exactly_once\n",
			"delivery (line 13): exactly_once needs checkpoint.store: kafka, so that each checkpoint is written in the Kafka transaction of the events it covers: set checkpoint.store: kafka"},
		{"exactly_once with mysql store", minimal + "delivery: exactly_once\ncheckpoint: {store: mysql, name: orders}\n", "delivery (line 13): exactly_once needs checkpoint.store: kafka"},
		{"kafka store without exactly_once", minimal + "checkpoint: {store: kafka, name: orders, sink: main, topic: cp}\n",
			"checkpoint.store (line 13): kafka needs delivery: exactly_once: a Kafka checkpoint is written only inside the transaction that carries the events it covers; set delivery: exactly_once, or use store: file or mysql"},
		{"transactions without exactly_once", minimal + "transactions: {max_events: 10}\n",
			"transactions.max_events (line 13): is only for delivery: exactly_once; remove it or set delivery: exactly_once"},
		{"name required", strings.Replace(eos, "name: orders, ", "", 1),
			`checkpoint.name (line 14): is required for store: kafka; name this pipeline, such as orders-relay (the transactional.id is "outboxd-" + name)`},
		{"name charset", strings.Replace(eos, "name: orders", `name: "a b"`, 1), `checkpoint.name (line 14): "a b" must be 1 to 64 characters`},
		{"sink required", strings.Replace(eos, "sink: main, ", "", 1),
			"checkpoint.sink (line 14): is required for store: kafka; name the Kafka sink whose cluster holds the checkpoint topic (Kafka sinks: main)"},
		{"sink unknown", strings.Replace(eos, "sink: main, ", "sink: nope, ", 1), `checkpoint.sink (line 14): "nope" is not a configured sink; Kafka sinks: main`},
		{"sink rocketmq", strings.Replace(strings.Replace(eos, "routes:", "  mq: {type: rocketmq, nameservers: [\"127.0.0.1:9876\"]}\nroutes:", 1), "sink: main, ", "sink: mq, ", 1),
			`checkpoint.sink (line 15): "mq" is a rocketmq sink; name a Kafka sink (Kafka sinks: main)`},
		{"topic required", strings.Replace(eos, ", topic: outboxd_checkpoints", "", 1),
			"checkpoint.topic (line 14): is required for store: kafka; name a topic of its own, such as outboxd_checkpoints"},
		{"topic name", strings.Replace(eos, "topic: outboxd_checkpoints", `topic: "a/b"`, 1), `checkpoint.topic (line 14): "a/b" is not a Kafka topic name`},
		{"topic of a route", strings.Replace(eos, "  - sink: main\n", "  - {sink: main, topic: outboxd_checkpoints}\n", 1),
			`checkpoint.topic (line 14): "outboxd_checkpoints" is also routes[0].topic; use a topic of its own`},
		{"topic of dead letters", eos + "on_poison: dead_letter\ndead_letter: {sink: main, topic: outboxd_checkpoints}\n",
			`checkpoint.topic (line 14): "outboxd_checkpoints" is also dead_letter.topic`},
		{"path with kafka store", strings.Replace(eos, "name: orders", "name: orders, path: /var/lib/cp.json", 1),
			"checkpoint.path (line 14): is only for store: file; remove it or set checkpoint.store: file"},
		{"table with kafka store", strings.Replace(eos, "name: orders", "name: orders, table: a.b", 1), "checkpoint.table (line 14): is only for store: mysql"},
		{"topic with file store", minimal + "checkpoint: {topic: cp}\n", "checkpoint.topic (line 13): is only for store: kafka; remove it or set checkpoint.store: kafka"},
		{"sink with mysql store", minimal + "checkpoint: {store: mysql, name: a, sink: main}\n", "checkpoint.sink (line 13): is only for store: kafka"},
		{"writer_addr", strings.Replace(eos, "name: orders", "name: orders, writer_addr: nope", 1), `checkpoint.writer_addr (line 14): "nope" is not host:port`},
		{"max_events", eos + "transactions: {max_events: -1}\n", "transactions.max_events (line 15): must be positive (default 100000); got -1"},
		{"max_bytes", eos + "transactions: {max_bytes: -1}\n", "transactions.max_bytes (line 15): must be positive (default 67108864); got -1"},
		{"timeout", eos + "transactions: {timeout: 500ms}\n", "transactions.timeout (line 15): must be from 1s to 596h"},
		{"interval past timeout", strings.Replace(eos, "topic: outboxd_checkpoints", "topic: outboxd_checkpoints, interval: 2m", 1),
			"checkpoint.interval (line 14): must be shorter than transactions.timeout (1m0s): with delivery: exactly_once it is the longest a Kafka transaction stays open"},
		{"not idempotent", strings.Replace(eos, `brokers: ["127.0.0.1:9092"]}`, `brokers: ["127.0.0.1:9092"], idempotent: false}`, 1),
			"sinks.main.idempotent (line 10): must be true with delivery: exactly_once (Kafka transactions need an idempotent producer)"},
		{"rocketmq route", twoSinks(`{type: rocketmq, nameservers: ["127.0.0.1:9876"]}`),
			`routes[1].sink (line 14): "other" is a rocketmq sink: with delivery: exactly_once every route goes into one Kafka transaction, which RocketMQ cannot join; send routes[1] to a Kafka sink`},
		{"rocketmq route by name", strings.Replace(twoSinks(`{type: rocketmq, nameservers: ["127.0.0.1:9876"]}`), "sink: other}", "sink: other, name: bills}", 1),
			`send route "bills" to a Kafka sink of checkpoint.sink's cluster, or use delivery: at_least_once`},
		{"rocketmq dead letters", strings.Replace(eos, "routes:", "  mq: {type: rocketmq, nameservers: [\"127.0.0.1:9876\"]}\nroutes:", 1) +
			"on_poison: dead_letter\ndead_letter: {sink: mq, topic: dlq}\n", `dead_letter.sink (line 17): "mq" is a rocketmq sink`},
		{"other brokers", twoSinks(`{type: kafka, brokers: ["127.0.0.1:9094"]}`),
			`sinks.other (line 11): is used by routes[1] but differs from checkpoint.sink "main" in brokers: with delivery: exactly_once every route and the dead-letter sink go through one transactional producer`},
		{"other tls sasl compression", twoSinks(`{type: kafka, brokers: ["127.0.0.1:9093", "127.0.0.1:9092"], tls: {}, sasl: {mechanism: PLAIN, username: u, password: p}, compression: zstd}`),
			`sinks.other (line 11): is used by routes[1] but differs from checkpoint.sink "main" in tls, sasl, compression:`},
		{"other sink of dead letters", strings.Replace(eos, "routes:", "  dl: {type: kafka, brokers: [\"10.0.0.1:9092\"]}\nroutes:", 1) +
			"on_poison: dead_letter\ndead_letter: {sink: dl, topic: dlq}\n", `sinks.dl (line 11): is used by dead_letter but differs from checkpoint.sink "main" in brokers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustFail(t, tc.yaml, noEnv)
			wantContains(t, got, tc.want)
			// One message per problem: each case breaks one rule.
			if n := strings.Count(got, "\n") + 1; n != 1 {
				t.Errorf("%d problems, want 1:\n%s", n, got)
			}
		})
	}
}

// ha, cleanup and reconcile work with the kafka store: the leader lock and the deletes are on
// checkpoint.writer_addr (default source.addr), which must be named when there are candidates.
func TestExactlyOnceWithHACleanupReconcile(t *testing.T) {
	y := eos + "ha: {enabled: true}\ncleanup: {}\nreconcile: {}\n"
	y = strings.Replace(y, "- table: shop.outbox_event", "- {table: shop.outbox_event, columns: {created_at: created_at}}", 1)
	c, err := parse([]byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultLockName("orders", c.ScopeTables()); c.HA.LockName != want || c.LockName() != want || c.Checkpoint.WriterAddr != "127.0.0.1:3306" {
		t.Errorf("ha %+v writer %q", c.HA, c.Checkpoint.WriterAddr)
	}

	several := strings.Replace(y, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"10.0.0.2:3306\"]\n", 1)
	got := mustFail(t, several, noEnv)
	wantContains(t, got, "checkpoint.writer_addr (line 14): is required with several source.addrs and ha or cleanup")
	if n := strings.Count(got, "\n") + 1; n != 1 {
		t.Errorf("%d problems, want 1:\n%s", n, got)
	}
	named := strings.Replace(several, "name: orders", `name: orders, writer_addr: "primary.db:3306"`, 1)
	if c, err := parse([]byte(named), noEnv); err != nil || c.Checkpoint.WriterAddr != "primary.db:3306" {
		t.Fatalf("%v %+v", err, c)
	}
	// Without ha and cleanup nothing needs the writer.
	plain := strings.Replace(eos, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"10.0.0.2:3306\"]\n", 1)
	if c, err := parse([]byte(plain), noEnv); err != nil || c.Checkpoint.WriterAddr != "" {
		t.Fatalf("%v %+v", err, c)
	}
	// The file store keeps its refusal, and now names the kafka store too.
	wantContains(t, mustFail(t, minimal+"ha: {enabled: true}\n", noEnv), "or kafka with delivery: exactly_once")
}

// The unknown-key hints list the new keys, so a typo is answered with the right spelling.
func TestExactlyOnceUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{minimal + "delivry: exactly_once\n", "allowed here: source, tables, sinks, routes, on_poison, dead_letter, retry, delivery, checkpoint, transactions,"},
		{eos + "transactions: {max_event: 10}\n", `transactions.max_event (line 15): unknown field "max_event"; allowed here: max_events, max_bytes, timeout`},
		{strings.Replace(eos, "topic: outboxd_checkpoints", "topics: outboxd_checkpoints", 1), "allowed here: store, path, interval, table, name, writer_addr, sink, topic"},
	} {
		wantContains(t, mustFail(t, tc.yaml, noEnv), tc.want)
	}
}

// configs/exactly-once.yaml, the example the guide points at, validates as shipped.
func TestExactlyOnceExampleLoads(t *testing.T) {
	t.Setenv("OUTBOXD_MYSQL_PASSWORD", "example-secret")
	c, err := Load(filepath.Join("..", "configs", "exactly-once.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.ExactlyOnce() || !c.Checkpoint.Kafka() || c.TransactionalID() != "outboxd-"+c.Checkpoint.Name || c.Transactions.MaxEvents != DefaultTxnMaxEvents {
		t.Errorf("delivery %q checkpoint %+v transactions %+v", c.Delivery, c.Checkpoint, c.Transactions)
	}
}
