package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// Every kind of malformed row, written through MariaDB, has its tested outcome under
// on_poison: dead_letter: the row goes to the dead-letter topic with a reason that names what is
// wrong, and the rows around it are delivered. A NULL key is not malformed (Kafka: null key).
// The same rows under on_poison: stop end the run at the first one (TestUnroutableRow covers
// stop's exit and its way out).
func TestMalformedRowOutcomes(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	// Every column nullable, so the table can hold what a buggy writer might insert; and a
	// second outbox table that lacks the key column altogether.
	w.exec("CREATE TABLE " + w.schema + `.outbox_lax (
  id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NULL, biz_key VARCHAR(64) NULL,
  topic VARCHAR(128) NULL, event_type VARCHAR(64) NULL, payload LONGBLOB NULL, headers TEXT NULL)`)
	w.exec("CREATE TABLE " + w.schema + `.outbox_nokey (
  id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL, topic VARCHAR(128) NOT NULL,
  payload LONGBLOB NOT NULL)`)
	kc := kafkaCluster(t, "t", "outbox.dead_letter")
	o := cfgOpts{
		Srv: w.srv, Start: w.position(), Dir: t.TempDir(),
		Tables:     []string{w.schema + ".outbox_lax", w.schema + ".outbox_nokey"},
		Sinks:      map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: 2s, max_message_bytes: 4096}", kc.ListenAddrs()[0])},
		Routes:     "  - sink: main\n    topic: t\n",
		OnPoison:   "dead_letter",
		DeadLetter: "{sink: main, topic: outbox.dead_letter}",
		// run refuses outbox_nokey (TestRunRefusesMissingColumnAndTable); skipping the column
		// check shows what the stream does with a column dropped while it runs.
		Source: "  skip_checks: [table_columns]\n",
	}
	rel := startRelay(t, o, daemon.Options{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay logs:\n%s", rel.logText())
		}
	})

	ins := func(table string, cols string, args ...any) {
		marks := strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")
		w.exec("INSERT INTO "+w.schema+"."+table+" ("+cols+") VALUES ("+marks+")", args...)
	}
	const cols = "event_id, biz_key, topic, payload, headers"
	big := strings.Repeat("x", 8192)
	ins("outbox_lax", cols, "ok-before", "k", "t", "a", nil)
	ins("outbox_lax", cols, "null-topic", "k", nil, "b", nil)
	ins("outbox_lax", cols, "empty-topic", "k", "", "c", nil)
	ins("outbox_lax", cols, nil, "k", "t", "null-event-id", nil)
	ins("outbox_lax", cols, "null-payload", "k", "t", nil, nil)
	ins("outbox_lax", cols, "bad-headers", "k", "t", "d", `[1, 2]`)
	ins("outbox_lax", cols, "not-json-headers", "k", "t", "e", `{nope`)
	ins("outbox_lax", cols, "too-large", "k", "t", big, nil)
	ins("outbox_lax", cols, "null-key", nil, "t", "f", nil)
	ins("outbox_nokey", "event_id, topic, payload", "no-key-column", "t", "g")
	ins("outbox_lax", cols, "ok-after", "k", "t", "h", nil)

	// Delivered: the good rows and the NULL key.
	c := newConsumer(t, kc, "t")
	c.waitForEvent("ok-after", 30*time.Second)
	delivered := map[string]bool{}
	for _, r := range c.settle(500 * time.Millisecond) {
		id := header(r, "event_id")
		delivered[id] = true
		if id == "null-key" && r.Key != nil {
			t.Errorf("null-key arrived with key %q, want a null key", r.Key)
		}
	}
	for _, id := range []string{"ok-before", "null-key", "ok-after"} {
		if !delivered[id] {
			t.Errorf("%s was not delivered", id)
		}
	}

	// Dead-lettered, each with a reason naming the problem and a code. A row without an event id is
	// recognised by its payload.
	want := map[string]string{
		"null-topic":       `topic column "topic" is NULL`,
		"empty-topic":      `topic column "topic" is empty`,
		"null-event-id":    `event id column "event_id" is NULL`,
		"null-payload":     `payload column "payload" is NULL`,
		"bad-headers":      "headers",
		"not-json-headers": "headers",
		"too-large":        "max_message_bytes",
		"no-key-column":    `no column "biz_key"`,
	}
	// The stable code (outbox_dead_letter_code): rejected for the one the broker (the sink's
	// max_message_bytes) refused, malformed for the rest.
	wantCode := func(id string) string {
		if id == "too-large" {
			return "rejected"
		}
		return "malformed"
	}
	dl := newConsumer(t, kc, "outbox.dead_letter")
	deadline := time.Now().Add(30 * time.Second)
	reasons := map[string]string{}
	codes := map[string]string{}
	for len(reasons) < len(want) && time.Now().Before(deadline) {
		for _, r := range dl.settle(300 * time.Millisecond) {
			id := header(r, "event_id")
			if id == "" {
				id = string(r.Value)
			}
			reasons[id] = header(r, "outbox_dead_letter_reason")
			codes[id] = header(r, "outbox_dead_letter_code")
		}
	}
	for id, frag := range want {
		got, ok := reasons[id]
		if !ok {
			t.Errorf("%s was not dead-lettered (dead letters: %v)", id, reasons)
			continue
		}
		if !strings.Contains(got, frag) {
			t.Errorf("%s: reason %q does not mention %q", id, got, frag)
		}
		if codes[id] != wantCode(id) {
			t.Errorf("%s: outbox_dead_letter_code %q, want %q", id, codes[id], wantCode(id))
		}
		if delivered[id] {
			t.Errorf("%s was delivered to its topic as well", id)
		}
	}
	// The too-large row's dead letter could not carry its payload either: it arrives without
	// it, saying how large it was.
	for _, r := range dl.got {
		if header(r, "event_id") == "too-large" && (len(r.Value) != 0 || header(r, "outbox_dead_letter_payload_omitted") != "8192") {
			t.Errorf("too-large dead letter: %d bytes, payload_omitted %q", len(r.Value), header(r, "outbox_dead_letter_payload_omitted"))
		}
	}
	if len(reasons) != len(want) {
		t.Errorf("dead letters %v, want exactly %d", reasons, len(want))
	}
}
