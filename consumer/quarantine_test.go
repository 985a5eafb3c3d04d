package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxd/outboxd/consumer"
)

// Quarantining must never fail on what a message or an error holds: a failure there turns a
// permanent error into a message retried forever, which holds its Kafka partition. The tables
// are tried in the test's utf8mb4 database and in a latin1 one (the server default of MySQL 5.7
// and of MariaDB before 11.6, so what CREATE TABLE without a charset gets there).
func TestQuarantineTakesAnyMessage(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var name string
	if err := f.DB.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	name += "_latin1"
	if _, err := f.DB.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET latin1"); err != nil {
		t.Fatal(err)
	}
	latin, err := consumer.New(f.DB, consumer.Options{Handler: "benefits", DedupTable: name + ".consumed_event", QuarantineTable: name + ".quarantined_event"})
	if err != nil {
		t.Fatal(err)
	}
	if err := latin.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 40000) // 80000 bytes: over TEXT's 65535
	cases := []struct {
		name string
		msg  consumer.Message
		why  error
	}{
		{"non-latin1 error", consumer.Message{}, errors.New("订单 5 不存在 🙈")},
		{"invalid UTF-8 in the error", consumer.Message{}, fmt.Errorf("bad payload %s", []byte{'x', 0xff, 0xfe})},
		{"error over 64 KiB", consumer.Message{}, errors.New(long)},
		{"key over 64 KiB", consumer.Message{Key: []byte(strings.Repeat("k", 70000))}, errors.New("bad key")},
		{"non-latin1 header", consumer.Message{Headers: []consumer.Header{{Key: "name", Value: []byte("张三")}}}, errors.New("bad")},
		{"msg_id over 512", consumer.Message{MsgID: strings.Repeat("m", 600)}, errors.New("bad")},
	}
	for ki, kit := range []*consumer.Kit{f.Kit, latin} {
		for i, c := range cases {
			msg := c.msg
			msg.EventID = fmt.Sprintf("ev-%d-%d", ki, i)
			out, err := kit.Handle(ctx, msg, func(context.Context, *sql.Tx, consumer.Message) error { return consumer.Permanent(c.why) })
			if err != nil || out != consumer.Rejected {
				t.Errorf("kit %d, %s: %v %.300v, want rejected and nil (ack)", ki, c.name, out, err)
			}
		}
		// A message without a usable event_id is quarantined alone: an event_id over 64 KiB.
		huge := consumer.Message{EventID: strings.Repeat("e", 70000), MsgID: "huge"}
		if out, err := kit.Handle(ctx, huge, grant(1)); err != nil || out != consumer.Rejected {
			t.Errorf("kit %d, event_id over 64 KiB: %v %v, want rejected", ki, out, err)
		}
	}
	for _, db := range []string{"", name + "."} {
		var why string
		if err := f.DB.QueryRow("SELECT error FROM " + db + "quarantined_event WHERE error LIKE '%订单%'").Scan(&why); err != nil || why != "permanent: 订单 5 不存在 🙈" {
			t.Errorf("%squarantined_event: error %q %v", db, why, err)
		}
		if err := f.DB.QueryRow("SELECT error FROM " + db + "quarantined_event WHERE error LIKE 'permanent: ééé%'").Scan(&why); err != nil ||
			len(why) > 65535 || len(why) < 65000 || !utf8.ValidString(why) {
			t.Errorf("%squarantined_event: long error of %d bytes (valid UTF-8 %v) %v", db, len(why), utf8.ValidString(why), err)
		}
		if n := f.Count(t, "SELECT COUNT(*) FROM "+db+"quarantined_event WHERE LENGTH(msg_key) = 70000"); n != 1 {
			t.Errorf("%squarantined_event: %d rows with the whole 70000-byte key", db, n)
		}
	}
}

// The quarantine row names the handler whose work refused the event, so that handlers sharing
// the table can be told apart. A quarantine table of an older kit, without the column, keeps
// taking rows (quarantining must not fail), and CreateTables adds the column to it.
func TestQuarantineNamesTheHandler(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	refuse := func(context.Context, *sql.Tx, consumer.Message) error { return consumer.Permanent(errors.New("no such order")) }
	audit, err := consumer.New(f.DB, consumer.Options{Handler: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kit := range []*consumer.Kit{f.Kit, audit} {
		if out, err := kit.Handle(ctx, consumer.Message{EventID: "ev-shared"}, refuse); err != nil || out != consumer.Rejected {
			t.Fatalf("Handle: %v %v, want rejected", out, err)
		}
	}
	if _, err := audit.Handle(ctx, consumer.Message{MsgID: "no-id"}, refuse); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	rows, err := f.DB.QueryContext(ctx, "SELECT CONCAT(handler, '/', event_id) FROM quarantined_event")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got[s]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var handlerName string
	if err := f.DB.QueryRowContext(ctx, "SELECT handler FROM quarantined_event WHERE event_id = 'ev-shared' ORDER BY id LIMIT 1").Scan(&handlerName); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["audit/ev-shared"] != 1 || got["audit/"] != 1 || got[handlerName+"/ev-shared"] != 1 || handlerName == "audit" {
		t.Errorf("quarantined (handler/event_id): %v, want one row of each handler for ev-shared and audit's for the message without id", got)
	}

	// A table of the kit before the column.
	for _, q := range []string{
		"CREATE TABLE old_quarantine (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id LONGBLOB NOT NULL, msg_id VARCHAR(512) NULL, topic VARCHAR(512) NULL, " +
			"msg_key LONGBLOB NULL, payload LONGBLOB NULL, headers JSON NULL, error TEXT NOT NULL, quarantined_at DATETIME(6) NOT NULL) DEFAULT CHARSET = utf8mb4",
	} {
		if _, err := f.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	old, err := consumer.New(f.DB, consumer.Options{Handler: "billing", DedupTable: "billing_seen", QuarantineTable: "old_quarantine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.DB.ExecContext(ctx, old.DDL()[0]); err != nil { // the dedup table only: as deployed before the upgrade
		t.Fatal(err)
	}
	if out, err := old.Handle(ctx, consumer.Message{EventID: "ev-before"}, refuse); err != nil || out != consumer.Rejected {
		t.Fatalf("Handle into the old quarantine table: %v %v, want rejected", out, err)
	}
	if err := old.CreateTables(ctx); err != nil {
		t.Fatalf("CreateTables over the old quarantine table: %v", err)
	}
	if out, err := old.Handle(ctx, consumer.Message{EventID: "ev-after"}, refuse); err != nil || out != consumer.Rejected {
		t.Fatalf("Handle after CreateTables: %v %v, want rejected", out, err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM old_quarantine WHERE event_id = 'ev-before' AND handler IS NULL"); n != 1 {
		t.Errorf("the row quarantined before the column: %d with a NULL handler, want 1", n)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM old_quarantine WHERE event_id = 'ev-after' AND handler = 'billing'"); n != 1 {
		t.Errorf("the row quarantined after CreateTables: %d naming billing, want 1", n)
	}
}
