package config

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/servercheck"
)

const shapeBase = `
source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 1}
sinks:
  k: {type: kafka, brokers: ["127.0.0.1:9092"]}
  mq: {type: rocketmq, nameservers: ["127.0.0.1:9876"]}
`

func TestShapeValidation(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // each must appear; none means valid
	}{
		{"all options on kafka", `
tables:
  - table: shop.outbox
    columns: {timestamp: ts, partition: p}
    timestamp_zone: Asia/Tokyo
    extra_headers: {trace: traceparent}
    empty_payload: tombstone
    on_update: stop
routes:
  - sink: k
    format: cloudevents
    cloudevents: {source: /shop, type: shop.Event, content_type: application/json}
`, nil},
		{"bad values", `
tables:
  - table: shop.outbox
    columns: {timestamp: ts}
    timestamp_zone: Mars/Olympus
    extra_headers: {a: event_id, b: x, c: x, d: ""}
    empty_payload: drop
    on_update: skip
routes:
  - sink: k
    format: json
  - sink: k
    cloudevents: {type: t}
`, []string{
			`tables[0].timestamp_zone: "Mars/Olympus" is not a time zone name`,
			`tables[0].extra_headers.a: header "event_id" is set by outboxd itself`,
			`tables[0].extra_headers.c: header "x" is already the header of column "b"`,
			`tables[0].extra_headers.d: is empty`,
			`tables[0].empty_payload: "drop" is not allowed`,
			`tables[0].on_update: "skip" is not allowed`,
			`routes[0].format: "json" is not allowed`,
			`routes[1].cloudevents: is set but format is raw`,
		}},
		{"cloudevents header from a column", `
tables:
  - table: shop.outbox
    extra_headers: {id: ce_id}
routes:
  - sink: k
    format: cloudevents
`, []string{`tables[0].extra_headers.id: header "ce_id" is set by routes[0] (format: cloudevents) itself`}},
		{"zone without timestamp", `
tables:
  - table: shop.outbox
    timestamp_zone: UTC
routes:
  - sink: k
`, []string{"tables[0].timestamp_zone: is set but columns.timestamp is not"}},
		{"kafka-only options on rocketmq", `
tables:
  - table: shop.outbox
    columns: {timestamp: ts, partition: p}
    empty_payload: tombstone
    extra_headers: {trace: traceparent}
  - table: bill.outbox
    columns: {partition: p}
routes:
  - match: {table: "shop.*"}
    sink: mq
    format: cloudevents
  - sink: k
`, []string{
			`tables[0].columns.timestamp: is Kafka only, but routes[0] sends rows of shop.outbox to rocketmq sink "mq"`,
			`tables[0].columns.partition: is Kafka only`,
			`tables[0].empty_payload: is Kafka only`,
			`routes[0].format: cloudevents is Kafka only`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse([]byte(shapeBase+c.yaml), func(string) (string, bool) { return "", false })
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			text := regexp.MustCompile(` \(line \d+\)`).ReplaceAllString(err.Error(), "")
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("error lacks %q:\n%v", w, text)
				}
			}
			if strings.Contains(err.Error(), "bill.outbox") {
				t.Errorf("bill.outbox is not routed to rocketmq:\n%v", err)
			}
		})
	}
}

func TestShapeColumnProblems(t *testing.T) {
	tb := Table{Table: "shop.outbox", Columns: Columns{Timestamp: "ts", Partition: "p"}}
	defs := []servercheck.Column{{Name: "TS", DataType: "varchar", ColumnType: "varchar(20)"}, {Name: "p", DataType: "decimal", ColumnType: "decimal(10,2)"}}
	ps := tb.ShapeColumnProblems("tables[0]", defs)
	if len(ps) != 2 || !strings.Contains(ps[0].Fix, "tables[0].columns.timestamp") || !strings.Contains(ps[1].Found, "decimal(10,2)") {
		t.Fatalf("%+v", ps)
	}
	defs = []servercheck.Column{{Name: "ts", DataType: "datetime"}, {Name: "p", DataType: "int"}}
	if ps := tb.ShapeColumnProblems("tables[0]", defs); len(ps) != 0 {
		t.Fatalf("%+v", ps)
	}
}
