package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

const minimal = `
source:
  flavor: mariadb
  addr: 127.0.0.1:3306
  user: outboxd
  server_id: 4242
tables:
  - table: shop.outbox_event
sinks:
  main: {type: kafka, brokers: ["127.0.0.1:9092"]}
routes:
  - sink: main
`

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// mustFail parses y and returns the error text, failing the test if parsing succeeded.
func mustFail(t *testing.T, y string, lookup func(string) (string, bool)) string {
	t.Helper()
	c, err := parse([]byte(y), lookup)
	if err == nil {
		t.Fatalf("parse succeeded, want an error; config:\n%s", c)
	}
	if c != nil {
		t.Errorf("config returned together with error %v", err)
	}
	return err.Error()
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("error does not contain %q:\n%s", w, got)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Source: Source{Flavor: gtid.MariaDB, Addr: "127.0.0.1:3306", Addrs: []string{"127.0.0.1:3306"}, OnMissingGTIDs: OnMissingStop, User: "outboxd", ServerID: 4242, Start: "latest",
			ReadTimeout: 10 * time.Second, MinBinlogRetention: 24 * time.Hour},
		Tables: []Table{{Table: "shop.outbox_event", Columns: Columns{
			EventID: "event_id", Key: "biz_key", Topic: "topic", Payload: "payload", EventType: "event_type", Headers: "headers"}}},
		Sinks: map[string]Sink{"main": {Type: "kafka", Brokers: []string{"127.0.0.1:9092"}, ClientID: "outboxd",
			Timeout: 10 * time.Second, MaxMessageBytes: 1048576, Compression: "none"}},
		Routes:     []Route{{Sink: "main", Topic: "{topic}"}},
		OnPoison:   "stop",
		Retry:      Retry{Initial: 100 * time.Millisecond, Max: 10 * time.Second, MissingTopicTimeout: 5 * time.Minute},
		Delivery:   DeliveryAtLeastOnce,
		Checkpoint: Checkpoint{Path: "./data/checkpoint.json", Interval: time.Second},
		Pipeline:   Pipeline{MaxInflightEvents: DefaultMaxInflightEvents, MaxInflightBytes: DefaultMaxInflightBytes},
		Log:        Log{Level: "info", Format: "json"},
	}
	c.lines = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%#v\nwant\n%#v", c, want)
	}
	if s, n := c.Tables[0].Schema(), c.Tables[0].Name(); s != "shop" || n != "outbox_event" {
		t.Errorf("Schema/Name = %q/%q", s, n)
	}
	// Defaults are idempotent.
	before := c.Redacted()
	c.ApplyDefaults()
	c.lines, before.lines = nil, nil
	if !reflect.DeepEqual(c, before) {
		t.Errorf("ApplyDefaults is not idempotent")
	}
}

const full = `
source:
  flavor: mysql
  addr: db.internal:3307
  user: relay
  password: ${PW}
  server_id: 4294967295
  start: "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"
  read_timeout: 45s
tables:
  - table: shop.outbox_event
    columns: {event_id: id2, key: biz_key, topic: t, payload: body, event_type: et, headers: h}
  - table: billing.outbox
    columns: {key: account}
sinks:
  main: {type: kafka, brokers: ["k1:9092", "k2:9092"], client_id: relay, timeout: 5s, max_message_bytes: 2000000}
  mq:
    type: rocketmq
    nameservers: ["ns1:9876"]
    group: g1
    namespace: ns
    access_key: AK
    secret_key: ${SK}
    send_timeout: 1500ms
routes:
  - match: {table: "shop.*", topic: "order.*"}
    sink: main
    topic: "{schema}.{table}.{topic}"
  - match: {topic: "bill.*"}
    sink: mq
    topic: "{topic}"
    tag: "{event_type}"
  - sink: main
on_poison: dead_letter
dead_letter: {sink: main, topic: outbox.dead_letter}
retry: {initial: 50ms, max: 1m, missing_topic_timeout: 30s}
checkpoint: {path: /var/lib/outboxd/cp.json, interval: 250ms}
log: {level: debug, format: console}
`

func TestFull(t *testing.T) {
	c, err := parse([]byte(full), envMap(map[string]string{"PW": "p#w: x", "SK": "secret"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Source: Source{Flavor: gtid.MySQL, Addr: "db.internal:3307", Addrs: []string{"db.internal:3307"}, OnMissingGTIDs: OnMissingStop, User: "relay", Password: "p#w: x",
			ServerID: 4294967295, Start: "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5", ReadTimeout: 45 * time.Second, MinBinlogRetention: 24 * time.Hour},
		Tables: []Table{
			{Table: "shop.outbox_event", Columns: Columns{EventID: "id2", Key: "biz_key", Topic: "t", Payload: "body", EventType: "et", Headers: "h"}},
			{Table: "billing.outbox", Columns: Columns{EventID: "event_id", Key: "account", Topic: "topic", Payload: "payload", EventType: "event_type", Headers: "headers"}},
		},
		Sinks: map[string]Sink{
			"main": {Type: "kafka", Brokers: []string{"k1:9092", "k2:9092"}, ClientID: "relay", Timeout: 5 * time.Second, MaxMessageBytes: 2000000, Compression: "none"},
			"mq": {Type: "rocketmq", Nameservers: []string{"ns1:9876"}, Group: "g1", Namespace: "ns", AccessKey: "AK",
				SecretKey: "secret", SendTimeout: 1500 * time.Millisecond},
		},
		Routes: []Route{
			{Match: Match{Table: "shop.*", Topic: "order.*"}, Sink: "main", Topic: "{schema}.{table}.{topic}"},
			{Match: Match{Topic: "bill.*"}, Sink: "mq", Topic: "{topic}", Tag: "{event_type}"},
			{Sink: "main", Topic: "{topic}"},
		},
		OnPoison:   "dead_letter",
		DeadLetter: &DeadLetter{Sink: "main", Topic: "outbox.dead_letter"},
		Retry:      Retry{Initial: 50 * time.Millisecond, Max: time.Minute, MissingTopicTimeout: 30 * time.Second},
		Delivery:   DeliveryAtLeastOnce,
		Checkpoint: Checkpoint{Path: "/var/lib/outboxd/cp.json", Interval: 250 * time.Millisecond},
		Pipeline:   Pipeline{MaxInflightEvents: DefaultMaxInflightEvents, MaxInflightBytes: DefaultMaxInflightBytes},
		Log:        Log{Level: "debug", Format: "console"},
	}
	c.lines = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%#v\nwant\n%#v", c, want)
	}
}

func TestExampleFileLoads(t *testing.T) {
	t.Setenv("OUTBOXD_MYSQL_PASSWORD", "example-secret")
	c, err := Load(filepath.Join("..", "configs", "outboxd.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Password != "example-secret" || c.Source.Addr != "127.0.0.1:3306" {
		t.Errorf("source = %+v", c.Source)
	}
	if got := c.Sinks["main"].Brokers; len(got) != 1 || got[0] != "127.0.0.1:9092" {
		t.Errorf("brokers = %q", got)
	}
	if len(c.Routes) != 2 || c.Routes[0].Topic != "shop.{topic}" || c.Tables[0].Columns.Key != "biz_key" {
		t.Errorf("routes/tables = %+v / %+v", c.Routes, c.Tables)
	}

	// Without the password variable the example must fail and say which variable is missing.
	os.Unsetenv("OUTBOXD_MYSQL_PASSWORD")
	_, err = Load(filepath.Join("..", "configs", "outboxd.example.yaml"))
	if err == nil {
		t.Fatal("loaded without OUTBOXD_MYSQL_PASSWORD")
	}
	wantContains(t, err.Error(), "OUTBOXD_MYSQL_PASSWORD", "source.password", "outboxd.example.yaml")
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"top level", minimal + "sourc: {}\n", []string{"sourc", `unknown field "sourc"`, "allowed here: source, tables"}},
		{"nested sink", strings.Replace(minimal, `brokers:`, `broker: ["x:1"], brokers:`, 1),
			[]string{"sinks.main.broker", `unknown field "broker"`, "line 10"}},
		{"route match", strings.Replace(minimal, "  - sink: main", "  - sink: main\n    match: {tabel: x}", 1),
			[]string{"routes[0].match.tabel", "allowed here: table, topic"}},
		{"columns", strings.Replace(minimal, "- table: shop.outbox_event", "- table: shop.outbox_event\n    columns: {id: x}", 1),
			[]string{"tables[0].columns.id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantContains(t, mustFail(t, tc.yaml, noEnv), tc.want...)
		})
	}
}

func TestDecodeAndValidateProblemsTogether(t *testing.T) {
	y := strings.Replace(minimal, "  server_id: 4242\n", "  serverid: 4242\n", 1)
	y = strings.Replace(y, "user: outboxd", "user: [a]", 1) + "log: {level: loud}\n"
	got := mustFail(t, y, noEnv)
	wantContains(t, got, `source.serverid (line 6): unknown field "serverid"`, "source.server_id (line 2): is required",
		"source.user (line 5): want a string, got a list", `log.level (line 13): "loud" is not allowed`)
	if strings.Contains(got, "source.user (line 5): is required") {
		t.Errorf("a field with a type error is also reported missing:\n%s", got)
	}
}

func TestMissingServerID(t *testing.T) {
	y := strings.Replace(minimal, "  server_id: 4242\n", "", 1)
	got := mustFail(t, y, noEnv)
	wantContains(t, got, "source.server_id", "is required", "1 to 4294967295")
	var fe *FieldError
	c, err := parse([]byte(y), noEnv)
	if !errors.As(err, &fe) || fe.Field != "source.server_id" || c != nil {
		t.Errorf("errors.As FieldError = %+v", fe)
	}
	if fe != nil && fe.Line != 2 { // falls back to the line of "source:"
		t.Errorf("line = %d, want 2", fe.Line)
	}
}

func TestTypeErrorsNameField(t *testing.T) {
	cases := map[string][]string{
		strings.Replace(minimal, "server_id: 4242", "server_id: abc", 1):                        {"source.server_id (line 6)", "integer from 0 to 4294967295", `"abc"`},
		strings.Replace(minimal, "server_id: 4242", "server_id: 4294967296", 1):                 {"source.server_id"},
		strings.Replace(minimal, "server_id: 4242", "server_id: -1", 1):                         {"source.server_id"},
		minimal + "retry: {initial: 10}\n":                                                      {"retry.initial", "duration"},
		minimal + "retry: {initial: fast}\n":                                                    {"retry.initial", "duration"},
		minimal + "routes: {sink: main}\n":                                                      {"routes", "already set at line"},
		strings.Replace(minimal, "routes:\n  - sink: main", "routes: {sink: main}", 1):          {"routes", "want a list, got a mapping"},
		strings.Replace(minimal, `brokers: ["127.0.0.1:9092"]`, `brokers: "127.0.0.1:9092"`, 1): {"sinks.main.brokers", "want a list"},
		strings.Replace(minimal, "user: outboxd", "user: {name: x}", 1):                         {"source.user", "want a string, got a mapping"},
		minimal + "sinks2: &a {x: 1}\n<<: *a\n":                                                 {"merge keys"},
	}
	for y, wants := range cases {
		wantContains(t, mustFail(t, y, noEnv), wants...)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Setenv("OUTBOXD_TEST_PW", "a#b: c ${NOT_EXPANDED} null")
	t.Setenv("OUTBOXD_TEST_ID", "77")
	t.Setenv("OUTBOXD_TEST_EMPTY", "")
	y := strings.Replace(minimal, "server_id: 4242", `server_id: "${OUTBOXD_TEST_ID}"
  password: ${OUTBOXD_TEST_PW}`, 1)
	y = strings.Replace(y, "user: outboxd", "user: ${OUTBOXD_TEST_UNSET:-relay}${OUTBOXD_TEST_EMPTY:-_x}$$USER$${HOME}", 1)
	y = strings.Replace(y, `["127.0.0.1:9092"]`, `["${OUTBOXD_TEST_UNSET:-127.0.0.1:9092}"]`, 1)
	y += "checkpoint: {interval: \"${OUTBOXD_TEST_UNSET:-2s}\"}\n"
	c, err := Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Password != "a#b: c ${NOT_EXPANDED} null" {
		t.Errorf("password = %q; expansion must not reinterpret the value", c.Source.Password)
	}
	if c.Source.ServerID != 77 {
		t.Errorf("server_id = %d", c.Source.ServerID)
	}
	if c.Source.User != "relay_x$USER${HOME}" {
		t.Errorf("user = %q", c.Source.User)
	}
	if c.Sinks["main"].Brokers[0] != "127.0.0.1:9092" || c.Checkpoint.Interval != 2*time.Second {
		t.Errorf("brokers = %q, interval = %s", c.Sinks["main"].Brokers, c.Checkpoint.Interval)
	}
	// An aliased value is expanded once: "$$" from the environment stays "$$" at every use.
	y = strings.Replace(minimal, "user: outboxd", "user: &u ${V}\n  password: *u", 1)
	c, err = parse([]byte(y), envMap(map[string]string{"V": "a$$b"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.User != "a$$b" || c.Source.Password != "a$$b" {
		t.Errorf("aliased expansion: user %q password %q", c.Source.User, c.Source.Password)
	}
	// Keys are not expanded: a sink named "$x" keeps its name.
	if _, err := parse([]byte(strings.Replace(minimal, "main:", "${X}:", 1)), noEnv); err == nil ||
		!strings.Contains(err.Error(), `"main" is not a configured sink; defined: ${X}`) {
		t.Errorf("key expansion: %v", err)
	}
}

func TestEnvErrors(t *testing.T) {
	y := strings.Replace(minimal, "user: outboxd", "user: ${OUTBOXD_TEST_UNSET}", 1)
	wantContains(t, mustFail(t, y, noEnv), "source.user (line 5)", "environment variable OUTBOXD_TEST_UNSET is not set")

	y = strings.Replace(minimal, "user: outboxd", "user: ${OUTBOXD", 1)
	wantContains(t, mustFail(t, y, noEnv), "source.user", "unterminated ${")

	y = strings.Replace(minimal, `"127.0.0.1:9092"`, `"${1BAD}"`, 1)
	wantContains(t, mustFail(t, y, noEnv), "sinks.main.brokers[0]", "invalid variable reference ${1BAD}")

	// A variable set to something of the wrong type names the field.
	y = strings.Replace(minimal, "server_id: 4242", "server_id: ${ID}", 1)
	wantContains(t, mustFail(t, y, envMap(map[string]string{"ID": "x1"})), "source.server_id", `got "x1"`)
}

func TestRouteToUnknownSink(t *testing.T) {
	y := strings.Replace(minimal, "  - sink: main", "  - sink: main\n  - sink: backup", 1)
	wantContains(t, mustFail(t, y, noEnv), "routes[1].sink (line 13)", `"backup" is not a configured sink; defined: main`)
}

func TestDeadLetterRequiredOnlyWithDeadLetter(t *testing.T) {
	if _, err := parse([]byte(minimal+"on_poison: stop\n"), noEnv); err != nil {
		t.Errorf("stop without dead_letter: %v", err)
	}
	wantContains(t, mustFail(t, minimal+"on_poison: dead_letter\n", noEnv), "dead_letter: is required with on_poison: dead_letter")

	c, err := parse([]byte(minimal+"on_poison: dead_letter\ndead_letter: {sink: main, topic: dlq}\n"), noEnv)
	if err != nil || c.DeadLetter.Topic != "dlq" {
		t.Errorf("dead_letter config: %v", err)
	}
	wantContains(t, mustFail(t, minimal+"on_poison: dead_letter\ndead_letter: {sink: other, topic: \"{topic}\"}\n", noEnv),
		`dead_letter.sink (line 14): "other" is not a configured sink`, "dead_letter.topic", "literal")
	wantContains(t, mustFail(t, minimal+"on_poison: drop\n", noEnv), `on_poison (line 13): "drop" is not allowed; use stop or dead_letter`)
}

func TestReadTimeout(t *testing.T) {
	for _, v := range []string{"45s", "1001ms", "2m"} {
		y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  read_timeout: "+v, 1)
		c, err := parse([]byte(y), noEnv)
		if err != nil {
			t.Errorf("read_timeout %s: %v", v, err)
			continue
		}
		want, _ := time.ParseDuration(v)
		if c.Source.ReadTimeout != want {
			t.Errorf("read_timeout %s: got %s", v, c.Source.ReadTimeout)
		}
	}
	// Not above the heartbeat period outboxd asks for: an idle stream would time out between
	// two heartbeats. 0 is the default, not an error.
	for _, v := range []string{"1s", "500ms", "-5s"} {
		y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  read_timeout: "+v, 1)
		wantContains(t, mustFail(t, y, noEnv), "source.read_timeout (line 7): must exceed the source heartbeat period 1s",
			"more than 30s for Dolt", "got "+strings.TrimPrefix(v, "+"))
	}
	y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  read_timeout: 10", 1)
	wantContains(t, mustFail(t, y, noEnv), "source.read_timeout")
}

func TestStart(t *testing.T) {
	for _, s := range []string{"latest", "earliest", "0-1-42", "0-1-42,1-2-7"} {
		y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  start: \""+s+"\"", 1)
		c, err := parse([]byte(y), noEnv)
		if err != nil {
			t.Errorf("start %q: %v", s, err)
		} else if c.Source.Start != s {
			t.Errorf("start = %q", c.Source.Start)
		}
	}
	for _, s := range []string{"3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5", "0-1", "nonsense", "0-1-x"} {
		y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  start: \""+s+"\"", 1)
		wantContains(t, mustFail(t, y, noEnv), "source.start (line 7)", "is not latest, earliest or a mariadb GTID set")
	}
}

func TestGlobsAndTemplates(t *testing.T) {
	cases := map[string][]string{
		`{match: {table: "shop.[", topic: "a\\"}, sink: main}`: {"routes[0].match.table", `"shop.[" is not a valid glob`, "routes[0].match.topic"},
		`{match: {table: "other.*"}, sink: main}`:              {"routes[0].match.table", "matches none of the configured tables"},
		`{sink: main, topic: "{topic}.{foo}"}`:                 {"routes[0].topic", "unknown placeholder {foo}", "{topic}, {schema}, {table}, {event_type}"},
		`{sink: main, topic: "a{topic"}`:                       {"routes[0].topic", "unclosed {"},
		`{sink: main, topic: "a}"}`:                            {"routes[0].topic", "unmatched }"},
		`{sink: main, tag: "{event_type}"}`:                    {"routes[0].tag", `only used by rocketmq sinks; sink "main" is kafka`},
	}
	for route, wants := range cases {
		y := strings.Replace(minimal, "  - sink: main", "  - "+route, 1)
		wantContains(t, mustFail(t, y, noEnv), wants...)
	}
	y := strings.Replace(minimal, "  - sink: main", `  - {match: {table: "shop.outbox_*", topic: "order.[a-z]*"}, sink: main, topic: "x.{schema}-{table}.{event_type}"}`, 1)
	if _, err := parse([]byte(y), noEnv); err != nil {
		t.Errorf("valid globs and template: %v", err)
	}
}

func TestTemplateRender(t *testing.T) {
	v := TemplateVars{Topic: "order.created", Schema: "shop", Table: "outbox", EventType: "Created"}
	cases := map[string]string{
		"{topic}":                               "order.created",
		"static":                                "static",
		"{schema}.{table}:{topic}/{event_type}": "shop.outbox:order.created/Created",
		"{event_type}{event_type}":              "CreatedCreated",
	}
	for src, want := range cases {
		tpl, err := ParseTemplate(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := tpl.Render(v); got != want {
			t.Errorf("%q rendered %q, want %q", src, got, want)
		}
		if tpl.String() != src {
			t.Errorf("String() = %q", tpl.String())
		}
	}
	tpl, _ := ParseTemplate("{event_type}")
	if got := tpl.Render(TemplateVars{Topic: "t"}); got != "" {
		t.Errorf("empty event_type rendered %q", got)
	}
	if _, err := ParseTemplate(""); err == nil {
		t.Error("empty template accepted")
	}
}

func TestSinkTypeFields(t *testing.T) {
	y := strings.Replace(minimal, `main: {type: kafka, brokers: ["127.0.0.1:9092"]}`,
		`main: {type: kafka, brokers: ["127.0.0.1:9092"], group: g, send_timeout: 1s}
  mq: {type: rocketmq, nameservers: ["ns:9876"], brokers: ["k:9092"], client_id: x, access_key: a, idempotent: false}
  bad: {type: pulsar}
  empty: {brokers: ["k:1"]}`, 1)
	wantContains(t, mustFail(t, y, noEnv),
		"sinks.main.group", "sinks.main.send_timeout (line 10): is not a kafka setting",
		"sinks.mq.brokers", "sinks.mq.client_id (line 11): is not a rocketmq setting",
		"sinks.mq.idempotent (line 11): is not a rocketmq setting",
		"sinks.mq.secret_key", "set together",
		`sinks.bad.type (line 12): "pulsar" is not allowed; use kafka or rocketmq`,
		"sinks.empty.type", "is required")
	// Kafka defaults are not applied to a rocketmq sink (they would then be "wrong type" fields).
	y = strings.Replace(minimal, `main: {type: kafka, brokers: ["127.0.0.1:9092"]}`,
		`main: {type: rocketmq, nameservers: ["127.0.0.1:9876"]}`, 1)
	c, err := parse([]byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sinks["main"]; s.Group != "outboxd-producer" || s.SendTimeout != 3*time.Second || s.ClientID != "" || s.Timeout != 0 {
		t.Errorf("rocketmq defaults: %+v", s)
	}
}

func TestValidateCollectsEverything(t *testing.T) {
	y := `
source: {flavor: postgres, addr: "localhost", server_id: 0}
tables:
  - table: noschema
  - table: a.b
  - table: a.b
sinks:
  k: {type: kafka, brokers: ["x:0"], timeout: -1s}
routes:
  - sink: k
    topic: "{x}"
retry: {initial: 1s, max: 10ms, missing_topic_timeout: -1s}
checkpoint: {interval: -1s}
log: {level: trace, format: xml}
`
	err := func() error { _, err := parse([]byte(y), noEnv); return err }()
	if err == nil {
		t.Fatal("accepted")
	}
	wants := []string{
		`source.flavor (line 2): "postgres" is not allowed; use mysql or mariadb`,
		"source.addr", "source.user", "source.server_id",
		`tables[0].table (line 4): "noschema" is not "schema.table"`,
		`tables[2].table (line 6): "a.b" is already listed as tables[1]`,
		"sinks.k.brokers[0]", "want 1 to 65535", "sinks.k.timeout (line 8): must be positive",
		"routes[0].topic (line 11)", "retry.max", "retry.missing_topic_timeout (line 12): must be positive", "checkpoint.interval", "log.level", "log.format",
	}
	wantContains(t, err.Error(), wants...)
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) < len(wants)-2 {
		t.Errorf("want every problem joined, got %d", len(joined.Unwrap()))
	}
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) || fe.Field == "" {
			t.Errorf("problem without a field: %v", e)
		}
	}

	// An empty document reports the required sections rather than succeeding.
	wantContains(t, mustFail(t, "", noEnv), "source.flavor", "tables: at least one", "sinks: at least one", "routes: at least one")
	wantContains(t, mustFail(t, "a: [", noEnv), "invalid YAML")
	wantContains(t, mustFail(t, minimal+"---\n"+minimal, noEnv), "more than one YAML document")
}

func TestRedaction(t *testing.T) {
	c, err := parse([]byte(full), envMap(map[string]string{"PW": "hunter2-pw", "SK": "sk-very-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Redacted()
	if r.Source.Password != "***" || r.Sinks["mq"].SecretKey != "***" || r.Sinks["mq"].AccessKey != "***" {
		t.Errorf("not redacted: %+v %+v", r.Source, r.Sinks["mq"])
	}
	if c.Source.Password != "hunter2-pw" || c.Sinks["mq"].SecretKey != "sk-very-secret" {
		t.Error("Redacted modified the original")
	}
	r.Sinks["main"].Brokers[0] = "changed"
	if c.Sinks["main"].Brokers[0] == "changed" {
		t.Error("Redacted shares slices with the original")
	}
	for _, s := range []string{c.String(), (*c).String(), fmtV(c), fmtV(*c), fmtV(c.Source), fmtV(c.Sinks["mq"]), fmtV(c.Sinks)} {
		for _, secret := range []string{"hunter2", "sk-very", `AK`} {
			if strings.Contains(s, secret) {
				t.Errorf("output leaks %q:\n%s", secret, s)
			}
		}
	}
	s := c.String()
	wantContains(t, s, "password: '***'", "secret_key: '***'", "timeout: 5s", "send_timeout: 1.5s", "server_id: 4294967295")
	// String is valid configuration YAML: it parses back to the redacted config.
	back, err := parse([]byte(s), noEnv)
	if err != nil {
		t.Fatalf("String() does not parse back: %v\n%s", err, s)
	}
	back.lines, r = nil, c.Redacted()
	r.lines = nil
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n%#v\nwant\n%#v", back, r)
	}
}

func fmtV(v any) string { return fmt.Sprintf("%v\n%+v", v, v) }

// A Kafka sink is idempotent unless idempotent: false says otherwise.
func TestSinkIdempotentDefault(t *testing.T) {
	c, err := parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Sinks["main"].KafkaIdempotent() {
		t.Error("a kafka sink without idempotent is not idempotent")
	}
	y := strings.Replace(minimal, `main: {type: kafka, brokers: ["127.0.0.1:9092"]}`,
		`main: {type: kafka, brokers: ["127.0.0.1:9092"], idempotent: false}`, 1)
	if c, err = parse([]byte(y), noEnv); err != nil {
		t.Fatal(err)
	}
	if c.Sinks["main"].KafkaIdempotent() {
		t.Error("idempotent: false is idempotent")
	}
}
