package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// createShard creates schema.table with the outbox columns of outboxDDL.
func (w *world) createShard(schema, table string) {
	w.t.Helper()
	w.exec(strings.Replace(fmt.Sprintf(outboxDDL, schema), ".outbox_event", "."+table, 1))
}

// Two schemas × three tables match one pattern; one table is created while outboxd runs. Rows
// interleaved across them with shared keys all arrive, in per-key order, on the topics the
// route's template names by the matched schema and table; a table in the same schemas that
// the pattern does not match is not relayed.
func TestShardedTablesByPattern(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	schemas := []string{w.schema + "_a", w.schema + "_b"}
	var topics []string
	for _, s := range schemas {
		w.exec("CREATE DATABASE " + s)
		w.exec("CREATE TABLE " + s + ".orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(64), note TEXT)")
		for i := range 3 {
			topics = append(topics, fmt.Sprintf("%s.outbox_event_%d", s, i))
		}
		w.createShard(s, "outbox_event_audit") // matches the schema glob, not the table glob
	}
	for i := range 3 {
		w.createShard(schemas[0], fmt.Sprintf("outbox_event_%d", i))
		if i < 2 { // <b>.outbox_event_2 is created while outboxd runs
			w.createShard(schemas[1], fmt.Sprintf("outbox_event_%d", i))
		}
	}
	kc := kafkaCluster(t, topics...)
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(),
		Patterns: []string{w.schema + "_[ab].outbox_event_[0-9]"},
		Sinks:    map[string]string{"main": kafkaSink(kc)},
		Routes:   "  - sink: main\n    topic: \"{schema}.{table}\"\n",
	}
	r := startRelay(t, o, daemon.Options{})

	var committed []string
	n := 0
	commitRound := func(tables []string) {
		for _, st := range tables {
			s, tb, _ := strings.Cut(st, ".")
			id := fmt.Sprintf("e%03d", n)
			w.commitIn(s, tb, row{EventID: id, Key: fmt.Sprintf("k%d", n%3), Topic: "t", Payload: []byte(id)})
			committed = append(committed, id)
			n++
		}
		w.commitIn(schemas[0], "outbox_event_audit", row{EventID: fmt.Sprintf("audit%03d", n), Key: "k0", Topic: "t", Payload: []byte("x")})
	}
	existing := topics[:5] // all but <b>.outbox_event_2
	for range 4 {
		commitRound(existing)
	}
	w.createShard(schemas[1], "outbox_event_2")
	for range 4 {
		commitRound(topics)
	}

	c := newConsumer(t, kc, topics...)
	got := c.waitFor(len(committed), 60*time.Second)
	checkPerKeyOrder(t, got, committed)
	perTopic := map[string]int{}
	for _, rec := range got {
		if table := header(rec, "outbox_table"); rec.Topic != table {
			t.Errorf("event %s of %s went to topic %s, want the template's {schema}.{table}", header(rec, "event_id"), table, rec.Topic)
		}
		perTopic[rec.Topic]++
	}
	if perTopic[topics[5]] != 4 {
		t.Errorf("the table created while running delivered %d rows, want 4 (from its first row); per topic: %v", perTopic[topics[5]], perTopic)
	}
	if extra := c.settle(500 * time.Millisecond); len(extra) != len(committed) {
		t.Errorf("got %d records, want %d: a table the pattern does not match was relayed", len(extra), len(committed))
	}
	if !strings.Contains(r.logText(), "outbox table found by pattern") || !strings.Contains(r.logText(), topics[5]) {
		t.Errorf("the table created while running is not logged as found:\n%s", r.logText())
	}

	// The checkpoint was written for the pattern: the same tables listed one by one (or another
	// pattern) do not trust it.
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	listed := o
	listed.Patterns, listed.Tables = nil, topics
	err := startRelay(t, listed, daemon.Options{}).waitExit(t, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "was written for the outbox tables ["+o.Patterns[0]+"]") {
		t.Fatalf("a config listing the matched tables resumed from the pattern's checkpoint: %v", err)
	}
}

// A pattern that matches no table warns at start; a table created later that matches it with a
// bad shape stops outboxd, before its first row, with the error the same table gets when it is
// listed, and the checkpoint stays before that row.
func TestPatternMatchingNothingThenBadTable(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	shard := w.schema + "_x"
	w.exec("CREATE DATABASE " + shard)
	w.exec("CREATE TABLE " + shard + ".orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(64), note TEXT)")
	o := simpleCfg(t, w, kc, w.position())
	o.Tables = nil
	o.Patterns = []string{shard + ".outbox_*"}
	r := startRelay(t, o, daemon.Options{})

	w.commit(row{EventID: "before", Key: "k", Topic: "t", Payload: []byte("1")}) // not relayed: outbox_event is not listed
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(r.logText(), "binlog stream started") {
		if time.Now().After(deadline) {
			t.Fatalf("outboxd did not start:\n%s", r.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := r.logText(); !strings.Contains(l, "tables[0].pattern") || !strings.Contains(l, "matches no table") {
		t.Fatalf("no warning for the pattern that matches nothing:\n%s", l)
	}

	if code, out := runBinary(t, "check", "--config", writeCfg(t, o)); code != 0 || !strings.Contains(out, "tables[0].pattern") || !strings.Contains(out, "matches no table") {
		t.Fatalf("check (exit %d) does not warn of the pattern that matches nothing:\n%s", code, out)
	}

	// The new table lacks the payload column.
	w.exec("CREATE TABLE " + shard + ".outbox_1 (id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL, biz_key VARCHAR(64), topic VARCHAR(128))")
	w.exec("INSERT INTO " + shard + ".outbox_1 (event_id, biz_key, topic) VALUES ('bad1', 'k', 't')")
	var bad string
	if err := w.db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&bad); err != nil {
		t.Fatal(err)
	}
	err := r.waitExit(t, 30*time.Second)
	if err == nil {
		t.Fatalf("outboxd went on after a table with a bad shape matched its pattern:\n%s", r.logText())
	}

	// The same table listed: the start-up check's lines.
	listed := o
	listed.Dir, listed.Patterns, listed.Tables = t.TempDir(), nil, []string{shard + ".outbox_1"}
	lr := startRelay(t, listed, daemon.Options{})
	lerr := lr.waitExit(t, 30*time.Second)
	if lerr == nil {
		t.Fatal("outboxd started with the bad table listed")
	}
	lines := func(e error) []string {
		var out []string
		for _, l := range strings.Split(e.Error(), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "source ") {
				out = append(out, l)
			}
		}
		return out
	}
	want := lines(lerr)
	if len(want) == 0 || !strings.Contains(strings.Join(want, "\n"), "payload") {
		t.Fatalf("the listed table's error names no payload column problem: %v", lerr)
	}
	if got := lines(err); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("a table found by pattern stopped with\n  %s\nwant the listed table's\n  %s\nfull error: %v", strings.Join(got, "\n  "), strings.Join(want, "\n  "), err)
	}
	if !strings.Contains(err.Error(), shard+".outbox_1") || !strings.Contains(err.Error(), "the source server is not set up for outboxd") {
		t.Errorf("error does not name the table and the start-up checks: %v", err)
	}
	if ck := readCheckpoint(t, o.Dir); ck != "" && gtidSeq(t, ck) >= gtidSeq(t, bad) {
		t.Fatalf("checkpoint %s covers the bad table's row (%s): it was skipped", ck, bad)
	}
}

// backfill takes a table that a pattern entry matches, with that entry's columns.
func TestPatternTableBackfill(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	shard := w.schema + "_07"
	w.exec("CREATE DATABASE " + shard)
	w.exec("CREATE TABLE " + shard + ".orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(64), note TEXT)")
	w.createShard(shard, "outbox_event")
	w.commitIn(shard, "outbox_event", row{EventID: "b1", Key: "k", Topic: "t", Payload: []byte("1")},
		row{EventID: "b2", Key: "k", Topic: "t", Payload: []byte("2")})
	topic := shard + ".outbox_event"
	kc := kafkaCluster(t, topic)
	o := simpleCfg(t, w, kc, "")
	o.Tables, o.Patterns = nil, []string{w.schema + "_*.outbox_event"}
	o.Routes = "  - sink: main\n    topic: \"{schema}.{table}\"\n"
	code, out := runBinary(t, "backfill", "--config", writeCfg(t, o), "--table", topic)
	if code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, out)
	}
	got := newConsumer(t, kc, topic).waitFor(2, 30*time.Second)
	checkPerKeyOrder(t, got, []string{"b1", "b2"})
}
