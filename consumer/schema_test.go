package consumer_test

import (
	"database/sql"
	"os/exec"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/consumer"
)

func TestDDLUsesTheConfiguredNames(t *testing.T) {
	kit, err := consumer.New(&sql.DB{}, consumer.Options{Handler: "h", DedupTable: "app.seen", QuarantineTable: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	ddl := kit.DDL()
	if len(ddl) != 2 || !strings.HasPrefix(ddl[0], "CREATE TABLE IF NOT EXISTS `app`.`seen` (") ||
		!strings.HasPrefix(ddl[1], "CREATE TABLE IF NOT EXISTS `bad` (") || strings.Contains(strings.Join(ddl, ""), "--") {
		t.Fatalf("DDL:\n%s", strings.Join(ddl, "\n;\n"))
	}
	for _, o := range []consumer.Options{{Handler: "h", DedupTable: "x; DROP TABLE y"}, {Handler: "h", QuarantineTable: "a.b.c"}, {Handler: "h", DedupTable: "t", QuarantineTable: "t"},
		{}, {Handler: "a b"}, {Handler: "it's"}, {Handler: strings.Repeat("h", 65)}} {
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
	if consumer.IsPermanent(nil) || consumer.Permanent(nil) != nil || !consumer.IsPermanent(consumer.Permanent(sql.ErrNoRows)) {
		t.Error("Permanent/IsPermanent")
	}
}

// The kit is a library for consumers: outboxd's own binary must not link it.
func TestDaemonDoesNotImportTheKit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/outboxd/outboxd/cmd/outboxd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/outboxd/outboxd/consumer") || strings.HasPrefix(pkg, "github.com/outboxd/outboxd/examples") {
			t.Errorf("cmd/outboxd depends on %s", pkg)
		}
	}
	if !strings.Contains(string(out), "github.com/outboxd/outboxd/daemon") {
		t.Fatal("go list -deps did not list the daemon: the check looks at the wrong thing")
	}
}

// An isolation level go-sql-driver cannot set fails New, not every Handle (which would hold a
// Kafka partition forever, one failing message after the other).
func TestNewRejectsIsolationTheDriverCannotSet(t *testing.T) {
	for _, l := range []sql.IsolationLevel{sql.LevelWriteCommitted, sql.LevelSnapshot, sql.LevelLinearizable, 99} {
		if _, err := consumer.New(&sql.DB{}, consumer.Options{Handler: "h", Isolation: l}); err == nil {
			t.Errorf("Isolation %v: no error", l)
		}
	}
	for _, l := range []sql.IsolationLevel{sql.LevelDefault, sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
		if _, err := consumer.New(&sql.DB{}, consumer.Options{Handler: "h", Isolation: l}); err != nil {
			t.Errorf("Isolation %v: %v", l, err)
		}
	}
}
