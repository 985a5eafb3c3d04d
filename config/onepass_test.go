package config

import (
	"strings"
	"testing"
)

// An unknown key in a sink lists the keys of that sink's type only: a Kafka sink's message
// names no RocketMQ key and the other way round; a sink of no known type lists them all.
func TestAllowedKeysPerSinkType(t *testing.T) {
	kafka := strings.Replace(minimal, `brokers:`, `broker: ["x:1"], brokers:`, 1)
	got := mustFail(t, kafka, noEnv)
	wantContains(t, got, `sinks.main.broker (line 10): unknown field "broker"; allowed here: type, brokers, client_id, timeout, max_message_bytes, tls, sasl, idempotent`)
	for _, rmq := range []string{"nameservers", "group", "namespace", "access_key", "send_timeout"} {
		if strings.Contains(got, rmq) {
			t.Errorf("a kafka sink's allowed keys list the RocketMQ key %s:\n%s", rmq, got)
		}
	}

	rocket := strings.Replace(minimal, `{type: kafka, brokers: ["127.0.0.1:9092"]}`, `{type: rocketmq, nameserver: ["127.0.0.1:9876"]}`, 1)
	got = mustFail(t, rocket, noEnv)
	wantContains(t, got, `unknown field "nameserver"; allowed here: type, nameservers, group, namespace, access_key, secret_key, access_key_file, secret_key_file, send_timeout`)
	if strings.Contains(got, "brokers") {
		t.Errorf("a rocketmq sink's allowed keys list Kafka keys:\n%s", got)
	}

	unknown := strings.Replace(minimal, `{type: kafka, brokers:`, `{type: pulsar, broker:`, 1)
	wantContains(t, mustFail(t, unknown, noEnv), "allowed here: type, brokers, client_id", "nameservers", "send_timeout")
}

// One pass reports every problem: unknown keys, values of the wrong type and the values only
// Validate can judge, source.start among them, so a typo in start is not reported only after
// the others were fixed.
func TestEveryProblemInOnePass(t *testing.T) {
	y := strings.Replace(minimal, "  server_id: 4242\n", "  server_id: 4242\n  start: lastest\n  serverid: 1\n", 1)
	y = strings.Replace(y, "flavor: mariadb", "flavr: mariadb", 1)
	y = strings.Replace(y, "  main: {type: kafka, brokers:", "  main: {type: kafka, timout: 1s, brokers:", 1)
	y += "log: {level: loud, formt: json}\npipeline: {max_inflight_events: many}\n"
	got := mustFail(t, y, noEnv)
	wantContains(t, got,
		`source.flavr (line 3): unknown field "flavr"`,
		`source.flavor (line 2): is required`,
		`source.start (line 7): "lastest" is not latest, earliest or a GTID set`,
		`source.serverid (line 8): unknown field "serverid"`,
		`sinks.main.timout (line 12): unknown field "timout"`,
		`log.level (line 15): "loud" is not allowed`,
		`log.formt (line 15): unknown field "formt"`,
		`pipeline.max_inflight_events (line 16): want an integer, got "many"`)

	// A GTID set of the source's flavor passes; one of the other flavor does not.
	ok := strings.Replace(minimal, "  server_id: 4242\n", "  server_id: 4242\n  start: 0-1-100\n", 1)
	if _, err := parse([]byte(ok), noEnv); err != nil {
		t.Fatalf("start: 0-1-100 on mariadb: %v", err)
	}
	for _, start := range []string{"latest", "earliest"} {
		y := strings.Replace(minimal, "  server_id: 4242\n", "  server_id: 4242\n  start: \""+start+"\"\n", 1)
		if _, err := parse([]byte(y), noEnv); err != nil {
			t.Fatalf("start: %q: %v", start, err)
		}
	}
	mysqlSet := strings.Replace(ok, "flavor: mariadb", "flavour: mysql", 1)
	if got := mustFail(t, mysqlSet, noEnv); strings.Contains(got, "source.start") {
		t.Errorf("a GTID set is reported although the flavor is unknown:\n%s", got)
	}
	bad := strings.Replace(minimal, "  server_id: 4242\n", "  server_id: 4242\n  start: 3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5\n", 1)
	wantContains(t, mustFail(t, bad, noEnv), "source.start (line 7)")
}
