package config

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/servercheck"
)

// timestamp_zone names a fixed zone. A content_type of application/cloudevents... is how the Kafka binding marks structured mode
// (the value is the whole event as JSON): a consumer's SDK would then read the payload as an
// envelope. And header names are matched as the SDKs read them, case-insensitively.
func TestShapeConfigNonsense(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"structured content type", `
tables:
  - table: shop.outbox
routes:
  - sink: k
    format: cloudevents
    cloudevents: {content_type: application/cloudevents+json}
`, `routes[0].cloudevents.content_type: "application/cloudevents+json" marks structured mode`},
		{"structured content type, other case", `
tables:
  - table: shop.outbox
routes:
  - sink: k
    format: cloudevents
    cloudevents: {content_type: Application/CloudEvents-Batch+json}
`, `routes[0].cloudevents.content_type: "Application/CloudEvents-Batch+json" marks structured mode`},
		{"extra header in another case", `
tables:
  - table: shop.outbox
    extra_headers: {id: CE_ID, ct: Content-Type}
routes:
  - sink: k
    format: cloudevents
`, `tables[0].extra_headers.id: header "CE_ID" is set by routes[0] (format: cloudevents) itself`},
		// "Local" is whatever zone the host running outboxd has: the record times would change
		// with the machine.
		{"host zone", `
tables:
  - table: shop.outbox
    columns: {timestamp: ts}
    timestamp_zone: Local
routes:
  - sink: k
`, `tables[0].timestamp_zone: "Local" is the zone of the host outboxd runs on`},
		// The RocketMQ sink drops such headers (they are system properties), so the config
		// says so instead of each message losing it quietly.
		{"rocketmq system property as a header", `
tables:
  - table: shop.outbox
    extra_headers: {k: KEYS, t: traceparent}
routes:
  - sink: mq
`, `tables[0].extra_headers.k: header "KEYS" is a RocketMQ system property, which routes[0] (rocketmq sink "mq") cannot carry`},
		{"typo of an option", `
tables:
  - table: shop.outbox
    empty_paylod: tombstone
routes:
  - sink: k
`, `empty_paylod`},
		{"typo of a column role", `
tables:
  - table: shop.outbox
    columns: {timestmp: ts}
routes:
  - sink: k
`, `timestmp`},
		{"cloudevents typo", `
tables:
  - table: shop.outbox
routes:
  - sink: k
    format: cloudevents
    cloudevents: {sources: /x}
`, `sources`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse([]byte(shapeBase+c.yaml), func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(regexp.MustCompile(` \(line \d+\)`).ReplaceAllString(err.Error(), ""), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// timestamp_zone only applies to a DATETIME: on a TIMESTAMP (an instant) or an epoch-millis
// integer it changes nothing, which check and run say as a warning.
func TestShapeZoneOnInstantColumn(t *testing.T) {
	tb := Table{Table: "shop.outbox", Columns: Columns{Timestamp: "ts"}, TimestampZone: "Europe/Berlin"}
	for _, d := range []servercheck.Column{{Name: "ts", DataType: "timestamp", ColumnType: "timestamp(3)"}, {Name: "ts", DataType: "bigint", ColumnType: "bigint(20)"}} {
		ps := tb.ShapeColumnProblems("tables[0]", []servercheck.Column{d})
		if len(ps) != 1 || !ps[0].Warning || !strings.Contains(ps[0].Fix, "tables[0].timestamp_zone") {
			t.Errorf("%s: %+v, want one warning naming tables[0].timestamp_zone", d.ColumnType, ps)
		}
	}
	if ps := tb.ShapeColumnProblems("tables[0]", []servercheck.Column{{Name: "ts", DataType: "datetime", ColumnType: "datetime(3)"}}); len(ps) != 0 {
		t.Errorf("DATETIME: %+v", ps)
	}
}
