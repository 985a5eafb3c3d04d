package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A session can log its outbox INSERT as a statement (SET SESSION binlog_format=STATEMENT; with
// MariaDB's default MIXED some INSERTs are) or with a partial row image (binlog_row_image
// MINIMAL leaves out the columns the INSERT did not set, NOBLOB the BLOB/TEXT/JSON ones), which
// no check of the global settings sees. outboxd must stop with an error that names the table,
// the transaction and the setting, deliver and checkpoint what came before, and never move the
// checkpoint past that transaction, also not on the next start.
func TestUnreadableOutboxRowStopsOutboxd(t *testing.T) {
	cases := []struct {
		name    string
		setup   []string // run first, as root; {schema} is the test's schema
		session string
		insert  string   // into outbox_event, some columns left to their defaults; {csv} is a CSV's path
		want    []string // in the error
		fix     []string // in the fix, apart from the error
	}{
		// LOAD DATA is logged as its own event (EXECUTE_LOAD_QUERY), not as a QUERY.
		{"load data", nil, "SET SESSION binlog_format = 'STATEMENT'",
			"LOAD DATA INFILE '{csv}' INTO TABLE outbox_event FIELDS TERMINATED BY ',' (event_id, biz_key, topic, payload)",
			[]string{"statement-logged LOAD DATA"}, []string{"binlog_format=ROW"}},
		{"statement", nil, "SET SESSION binlog_format = 'STATEMENT'",
			"INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
			[]string{"statement-logged INSERT"}, []string{"binlog_format=ROW", "SET SESSION binlog_format"}},
		// The binlog keeps the text as sent: a "--<tab>" comment before it and MariaDB's
		// per-statement variables must not hide the INSERT.
		{"statement after a tab comment", nil, "SET SESSION binlog_format = 'STATEMENT'",
			"--\tfrom the app\nINSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
			[]string{"statement-logged INSERT"}, []string{"binlog_format=ROW"}},
		{"set statement for", nil, "SET SESSION binlog_format = 'STATEMENT'",
			"SET STATEMENT sql_mode = '' FOR INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
			[]string{"statement-logged INSERT"}, []string{"binlog_format=ROW"}},
		// MariaDB's default: a deterministic INSERT is logged as a statement.
		{"mixed", nil, "SET SESSION binlog_format = 'MIXED'",
			"INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
			[]string{"statement-logged INSERT"}, []string{"binlog_format=ROW"}},
		// A trigger writes the outbox: the binlog holds only the INSERT into invoices.
		{"trigger", []string{
			"CREATE TABLE {schema}.invoices (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(20))",
			"CREATE TRIGGER {schema}.invoices_outbox AFTER INSERT ON {schema}.invoices FOR EACH ROW " +
				"INSERT INTO {schema}.outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
		}, "SET SESSION binlog_format = 'STATEMENT'",
			"INSERT INTO invoices (note) VALUES ('x')",
			[]string{"statement-logged INSERT into", ".invoices in the outbox table's schema", "a trigger"}, []string{"binlog_format=ROW"}},
		{"minimal row image", nil, "SET SESSION binlog_row_image = 'MINIMAL'",
			"INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('bad', 'k', 't', 'p')",
			[]string{"lacks column(s) event_type, headers"}, []string{"binlog_row_image=FULL", "SET SESSION binlog_row_image"}},
		{"noblob row image", nil, "SET SESSION binlog_row_image = 'NOBLOB'",
			"INSERT INTO outbox_event (event_id, biz_key, topic, event_type) VALUES ('bad', 'k', 't', 'x')",
			[]string{"lacks column(s) payload, headers"}, []string{"binlog_row_image=FULL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			for _, q := range c.setup {
				w.exec(strings.ReplaceAll(q, "{schema}", w.schema))
			}
			r := startRelayed(t, w, "before")
			o, cfgPath, p, cons, before := r.o, r.cfgPath, r.p, r.cons, r.gtid

			ctx := context.Background()
			conn, err := w.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			csv := filepath.Join(t.TempDir(), "rows.csv")
			if err := os.WriteFile(csv, []byte("bad,k,t,p\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			insert := strings.ReplaceAll(c.insert, "{csv}", csv)
			for _, q := range []string{"USE " + w.schema, c.session, insert} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			var bad string
			if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&bad); err != nil {
				t.Fatal(err)
			}

			code := p.wait(t, 30*time.Second)
			out := p.output()
			want := append([]string{"outbox table " + w.schema + ".outbox_event", "transaction " + bad}, c.want...)
			if code != 1 {
				t.Fatalf("outboxd exited %d after an unreadable outbox row, want 1:\n%s", code, out)
			}
			// The error says what is wrong; the fix is a field of its own in the log line and a
			// line of its own for the user.
			errText, fix := stopFields(out)
			for _, s := range want {
				if !strings.Contains(errText, s) {
					t.Errorf("error lacks %q:\n%s", s, out)
				}
			}
			for _, s := range c.fix {
				if !strings.Contains(fix, s) || strings.Contains(errText, s) {
					t.Errorf("fix lacks %q or the error has it too:\n%s", s, out)
				}
			}
			if fix == "" || !strings.Contains(out, "outboxd: fix: "+fix) {
				t.Errorf("the fix is not printed on a line of its own:\n%s", out)
			}
			if strings.Contains(out, "reconnecting") {
				t.Errorf("an unreadable row was treated as a lost connection:\n%s", out)
			}
			if got := readCheckpoint(t, o.Dir); got != before {
				t.Fatalf("checkpoint %q after the stop, want %q (before transaction %s)", got, before, bad)
			}
			if ids := eventIDs(cons.settle(300 * time.Millisecond)); strings.Join(ids, ",") != "before" {
				t.Errorf("delivered %v, want only the row before", ids)
			}

			// The next start meets the same transaction and stops the same way.
			code, out = runBinary(t, "run", "--config", cfgPath)
			if code != 1 || !strings.Contains(out, "transaction "+bad) {
				t.Fatalf("restart exited %d:\n%s", code, out)
			}
			if got := readCheckpoint(t, o.Dir); got != before {
				t.Fatalf("checkpoint %q after the restart, want %q", got, before)
			}
		})
	}
}

// stopFields returns the error and fix fields of the log line outboxd wrote when it stopped with
// an error ("" when out has none).
func stopFields(out string) (errText, fix string) {
	for _, line := range strings.Split(out, "\n") {
		var l struct{ Message, Error, Fix string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "outboxd stopped with an error" {
			return l.Error, l.Fix
		}
	}
	return "", ""
}

// relayed is outboxd (the binary) streaming w's outbox from where it was at the start, with one
// row already delivered and checkpointed.
type relayed struct {
	o       cfgOpts
	cfgPath string
	p       *proc
	cons    *consumer // reads topic t from its start
	gtid    string    // of the row's transaction
}

func startRelayed(t *testing.T, w *world, eventID string, edit ...func(*cfgOpts)) relayed {
	t.Helper()
	kc := kafkaCluster(t, "t")
	r := relayed{o: simpleCfg(t, w, kc, w.position())}
	for _, e := range edit {
		e(&r.o)
	}
	r.cfgPath = writeCfg(t, r.o)
	r.p = startBinary(t, "run", "--config", r.cfgPath)
	r.gtid = w.commit(row{EventID: eventID, Key: "k", Topic: "t", Payload: []byte("p")})
	r.cons = newConsumer(t, kc, "t")
	r.cons.waitForEvent(eventID, 30*time.Second)
	waitCheckpoint(t, r.o.Dir, r.gtid, 10*time.Second)
	return r
}
