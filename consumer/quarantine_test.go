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
