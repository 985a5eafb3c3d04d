package consumer_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/consumer"
)

func TestDDLUsesTheConfiguredNames(t *testing.T) {
	kit, err := consumer.New(&sql.DB{}, consumer.Options{DedupTable: "app.seen", QuarantineTable: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	ddl := kit.DDL()
	if len(ddl) != 2 || !strings.HasPrefix(ddl[0], "CREATE TABLE IF NOT EXISTS `app`.`seen` (") ||
		!strings.HasPrefix(ddl[1], "CREATE TABLE IF NOT EXISTS `bad` (") || strings.Contains(strings.Join(ddl, ""), "--") {
		t.Fatalf("DDL:\n%s", strings.Join(ddl, "\n;\n"))
	}
	for _, o := range []consumer.Options{{DedupTable: "x; DROP TABLE y"}, {QuarantineTable: "a.b.c"}, {DedupTable: "t", QuarantineTable: "t"}} {
		if _, err := consumer.New(&sql.DB{}, o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}

func TestHeadersAndValues(t *testing.T) {
	got := consumer.HeadersJSON([]consumer.Header{{Key: "a", Value: []byte("x")}, {Key: "b", Value: []byte("base64:no")}, {Key: "c", Value: []byte{0xc3}}})
	if got != `{"a":"x","b":"base64:YmFzZTY0Om5v","c":"base64:ww=="}` {
		t.Fatalf("HeadersJSON: %s", got)
	}
	for in, want := range map[string]string{"plain": "plain", "base64:YmFzZTY0Om5v": "base64:no", "base64:": ""} {
		if b, err := consumer.DecodeValue(in); err != nil || string(b) != want {
			t.Errorf("DecodeValue(%q) = %q, %v; want %q", in, b, err, want)
		}
	}
	if _, err := consumer.DecodeValue("base64:%%"); err == nil {
		t.Error("DecodeValue of bad base64: no error")
	}
	if consumer.IsPermanent(nil) || consumer.Permanent(nil) != nil || !consumer.IsPermanent(consumer.Permanent(sql.ErrNoRows)) {
		t.Error("Permanent/IsPermanent")
	}
}
