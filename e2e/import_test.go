package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 23: moving over from Debezium. Debezium "delivered" the first transactions and saved
// its offset; outboxd imports that offset (gtids into the file store and the mysql store; an
// offset without gtids through --binlog-gtid-pos, which asks MariaDB for the GTID state at
// file:pos) and then delivers exactly the rows committed after it: none of Debezium's again,
// none lost.
func TestCheckpointImportDebezium(t *testing.T) {
	for _, c := range []struct {
		name         string
		mysqlStore   bool
		withoutGTIDs bool
	}{
		{"file store", false, false},
		{"mysql store", true, false},
		{"binlog-gtid-pos", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			kc := kafkaCluster(t, "t")
			o := simpleCfg(t, w, kc, "")
			if c.mysqlStore {
				useMySQLStore(w, &o, "imported")
			}
			cfgPath := writeCfg(t, o)
			for i := range 3 {
				w.commit(row{EventID: fmt.Sprintf("old%d", i), Key: "k", Topic: "t", Payload: []byte("x")})
			}
			// Debezium's offset after its last delivered transaction: the executed set and
			// the binlog offset after that transaction's commit (restartBinlogPosition).
			gtids := w.position()
			var file, ignore1, ignore2 string
			var pos int64
			if err := w.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &ignore1, &ignore2); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range 4 {
				id := fmt.Sprintf("new%d", i)
				w.commit(row{EventID: id, Key: "k", Topic: "t", Payload: []byte("y")})
				want = append(want, id)
			}
			value := fmt.Sprintf(`{"ts_sec":%d,"file":%q,"pos":%d,"gtids":%q,"server_id":1}`, time.Now().Unix(), file, pos, gtids)
			if c.withoutGTIDs {
				value = fmt.Sprintf(`{"ts_sec":%d,"file":%q,"pos":%d,"server_id":1}`, time.Now().Unix(), file, pos)
			}
			offsets := filepath.Join(o.Dir, "offsets.json")
			if err := os.WriteFile(offsets, []byte(`["outbox-connector",{"server":"shop"}] `+value+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"checkpoint", "import", "--config", cfgPath, "--from", "debezium", "--file", offsets}
			if c.withoutGTIDs {
				code, out := runBinary(t, args...)
				if code != 1 || !strings.Contains(out, "no GTID set") || !strings.Contains(out, "--binlog-gtid-pos") {
					t.Fatalf("import without gtids: exit %d, want 1 saying how to get a GTID set:\n%s", code, out)
				}
				args = append(args, "--binlog-gtid-pos")
			}
			code, out := runBinary(t, args...)
			if code != 0 || !strings.Contains(out, gtids) {
				t.Fatalf("checkpoint import: exit %d, want 0 writing %s:\n%s", code, gtids, out)
			}
			if !c.mysqlStore {
				if got := readCheckpoint(t, o.Dir); got != gtids {
					t.Fatalf("checkpoint after import: %q, want %q", got, gtids)
				}
			} else if got, _ := storeRow(t, w.db, w.schema+".outboxd_checkpoint", "imported"); got != gtids {
				t.Fatalf("checkpoint row after import: %q, want %q", got, gtids)
			}
			// A second import refuses to replace the checkpoint without --overwrite.
			if code, out := runBinary(t, args...); code != 1 || !strings.Contains(out, "--overwrite") {
				t.Fatalf("second import: exit %d, want 1 naming --overwrite:\n%s", code, out)
			}

			p := startBinary(t, "run", "--config", cfgPath)
			cons := newConsumer(t, kc, "t")
			cons.waitForEvent(want[len(want)-1], 30*time.Second)
			got := eventIDs(cons.settle(time.Second))
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want exactly %v:\n%s", got, want, tail(p.output(), 20))
			}
		})
	}
}

// Maxwell's positions row is read over SQL from its schema on the source: gtid_set becomes the
// checkpoint; a row without one is refused with how to get one.
func TestCheckpointImportMaxwell(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	cfgPath := writeCfg(t, o)
	mx := w.schema + "_maxwell"
	w.exec("CREATE DATABASE " + mx)
	// Maxwell's own DDL for the table (maxwell_schema.sql).
	w.exec("CREATE TABLE " + mx + `.positions (
  server_id int unsigned not null,
  binlog_file varchar(255),
  binlog_position int unsigned,
  gtid_set varchar(4096),
  client_id varchar(255) charset latin1 not null default 'maxwell',
  heartbeat_at bigint null default null,
  last_heartbeat_read bigint null default null,
  primary key(server_id, client_id))`)
	w.commit(row{EventID: "m0", Key: "k", Topic: "t", Payload: []byte("x")})
	gtids := w.position()
	w.exec("INSERT INTO "+mx+".positions (server_id, binlog_file, binlog_position, gtid_set, client_id) VALUES (0, 'mariadb-bin.000001', 4, ?, 'orders')", gtids)
	w.exec("INSERT INTO " + mx + ".positions (server_id, binlog_file, binlog_position, client_id) VALUES (1, 'mariadb-bin.000001', 4, 'legacy')")

	base := []string{"checkpoint", "import", "--config", cfgPath, "--from", "maxwell", "--maxwell-schema", mx}
	code, out := runBinary(t, append(base, "--client-id", "legacy")...)
	if code != 1 || !strings.Contains(out, "no GTID set") || !strings.Contains(out, "gtid_mode=true") {
		t.Fatalf("import of a row without gtid_set: exit %d, want 1 saying how to get one:\n%s", code, out)
	}
	if code, out := runBinary(t, append(base, "--client-id", "nobody")...); code != 1 || !strings.Contains(out, `no row for client_id "nobody"`) {
		t.Fatalf("import of a missing client: exit %d:\n%s", code, out)
	}
	if code, out := runBinary(t, append(base, "--client-id", "orders")...); code != 0 {
		t.Fatalf("import: exit %d:\n%s", code, out)
	}
	if got := readCheckpoint(t, o.Dir); got != gtids {
		t.Fatalf("checkpoint after import: %q, want %q", got, gtids)
	}
}
