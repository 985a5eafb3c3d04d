package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// With binlog_row_metadata=MINIMAL the TABLE_MAP has no column names: they come from
// information_schema, and an ALTER TABLE that shifts the columns while streaming is followed.
func TestMinimalRowMetadataAndAlter(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	if err := srv.Restart(context.Background(), mariadb.Options{RowMetadata: "MINIMAL"}); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, srv)
	var meta string
	if err := w.db.QueryRow("SELECT @@binlog_row_metadata").Scan(&meta); err != nil || meta != "MINIMAL" {
		t.Fatalf("binlog_row_metadata = %q, %v", meta, err)
	}
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	// MINIMAL is refused unless the operator accepts its risk (TestMinimalMetadataIsRefused).
	o.Source = "  allow_minimal_row_metadata: true\n"
	startRelay(t, o, daemon.Options{})

	w.commit(row{EventID: "before", Key: "k1", Topic: "t", EventType: str("A"), Payload: []byte("p1")})
	c := newConsumer(t, kc, "t")
	c.waitForEvent("before", 20*time.Second)
	// Columns move: a new one before biz_key shifts every later position by one.
	w.exec("ALTER TABLE " + w.schema + ".outbox_event ADD COLUMN trace_id VARCHAR(32) NULL AFTER event_id")
	w.exec("INSERT INTO "+w.schema+".outbox_event (event_id, trace_id, biz_key, topic, event_type, payload) VALUES (?,?,?,?,?,?)",
		"after", "trace-1", "k1", "t", "B", "p2") // one key: one partition, commit order
	rs := c.waitForEvent("after", 20*time.Second)
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", header(r, "event_id"), r.Key, header(r, "event_type"), r.Value))
	}
	if want := "[before/k1/A/p1 after/k1/B/p2]"; fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// `outboxd check` names each server problem with the setting to change; bad config is rejected
// with the field named.
func TestCheckReportsServerProblems(t *testing.T) {
	srv := sharedServer(t)
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")

	w.exec("CREATE USER 'good'@'127.0.0.1' IDENTIFIED BY 'pw1'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'good'@'127.0.0.1'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'good'@'127.0.0.1'")
	w.exec("CREATE USER 'noslave'@'127.0.0.1' IDENTIFIED BY 'pw2'")
	w.exec("GRANT BINLOG MONITOR ON *.* TO 'noslave'@'127.0.0.1'")
	w.exec("GRANT SELECT ON " + w.schema + ".outbox_event TO 'noslave'@'127.0.0.1'")
	t.Cleanup(func() {
		w.exec("DROP USER 'good'@'127.0.0.1'")
		w.exec("DROP USER 'noslave'@'127.0.0.1'")
	})

	cfg := func(user, pass string) string {
		o := simpleCfg(t, w, kc, "")
		o.User, o.Pass = user, pass
		o.Routes = "  - sink: main\n    topic: t\n"
		return writeCfg(t, o)
	}
	code, out := runBinary(t, "check", "--config", cfg("good", "pw1"))
	if code != 0 {
		t.Fatalf("check of a good setup exited %d:\n%s", code, out)
	}

	code, out = runBinary(t, "check", "--config", cfg("noslave", "pw2"))
	if code != 1 || !strings.Contains(out, "REPLICATION SLAVE") || !strings.Contains(out, "GRANT") {
		t.Fatalf("check without REPLICATION SLAVE exited %d:\n%s", code, out)
	}
	if strings.Contains(out, "pw2") {
		t.Fatalf("check printed the password:\n%s", out)
	}

	w.exec("SET GLOBAL binlog_format = 'STATEMENT'")
	defer w.exec("SET GLOBAL binlog_format = 'ROW'")
	code, out = runBinary(t, "check", "--config", cfg("good", "pw1"))
	if code != 1 || !strings.Contains(out, "binlog_format") || !strings.Contains(out, "ROW") {
		t.Fatalf("check with binlog_format=STATEMENT exited %d:\n%s", code, out)
	}
}

func TestBadConfigIsRejectedWithTheFieldNamed(t *testing.T) {
	dir := t.TempDir()
	good := `source: {flavor: mariadb, addr: "127.0.0.1:1", user: u, password: "", server_id: 7}
tables: [{table: shop.outbox_event}]
sinks: {main: {type: kafka, brokers: ["127.0.0.1:1"]}}
routes: [{sink: main}]
`
	cases := map[string]struct{ cfg, want string }{
		"unknown key":       {strings.Replace(good, "server_id: 7", "server_id: 7, serverid: 8", 1), "serverid"},
		"missing server_id": {strings.Replace(good, ", server_id: 7", "", 1), "server_id"},
		"unset variable":    {strings.Replace(good, `password: ""`, "password: \"${OUTBOXD_E2E_UNSET_VAR}\"", 1), "OUTBOXD_E2E_UNSET_VAR"},
		"unknown sink":      {strings.Replace(good, "routes: [{sink: main}]", "routes: [{sink: mian}]", 1), "mian"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out := runBinary(t, "run", "--config", path)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want 2 with %q in:\n%s", code, tc.want, out)
			}
		})
	}
}
