package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/internal/kittest"
)

// Two handlers on one dedup table (the default name) each handle the same event once: the
// handler is part of the key, so neither takes the other's mark for a duplicate.
func TestHandlersSharingTheDedupTableEachHandleTheEvent(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.DB.ExecContext(ctx, "CREATE TABLE audit (event_id VARCHAR(255) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	audit, err := consumer.New(f.DB, consumer.Options{Handler: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	record := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO audit (event_id) VALUES (?)", msg.EventID)
		return err
	}
	msg := consumer.Message{EventID: "ev-1", MsgID: "t/0@1"}
	for _, step := range []struct {
		kit  *consumer.Kit
		fn   consumer.Func
		want consumer.Outcome
	}{
		{f.Kit, grant(1), consumer.Processed},
		{audit, record, consumer.Processed}, // before the fix: Duplicate, and no audit row
		{f.Kit, grant(1), consumer.Duplicate},
		{audit, record, consumer.Duplicate},
	} {
		out, err := step.kit.Handle(ctx, msg, step.fn)
		if err != nil || out != step.want {
			t.Fatalf("Handle = %v, %v; want %v", out, err, step.want)
		}
	}
	if f.Count(t, "SELECT COUNT(*) FROM benefit")+f.Count(t, "SELECT COUNT(*) FROM audit") != 2 {
		t.Fatal("each handler's work is not there once")
	}
	for kit, h := range map[*consumer.Kit]string{f.Kit: kittest.Handler, audit: "audit"} {
		marks, err := kit.Marks(ctx)
		if err != nil || len(marks) != 1 || marks[0].EventID != "ev-1" {
			t.Fatalf("%s's marks: %+v, %v", h, marks, err)
		}
	}
}

// A dedup table of the kit before the handler was part of its key is refused, by CreateTables
// and by Handle, with the statements that migrate it; after them the old marks are the
// handler's: a redelivery of an event handled before the upgrade stays a duplicate.
func TestOldDedupTableIsRefusedWithItsMigration(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	for _, q := range []string{
		"CREATE TABLE old_event (event_id VARBINARY(255) NOT NULL PRIMARY KEY, status ENUM('PROCESSED', 'REJECTED') NOT NULL, msg_id VARCHAR(512) NULL, handled_at DATETIME(6) NOT NULL) DEFAULT CHARSET = utf8mb4",
		"INSERT INTO old_event VALUES ('ev-old', 'PROCESSED', 'm', NOW(6))",
	} {
		if _, err := f.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	kit, err := consumer.New(f.DB, consumer.Options{Handler: "benefits", DedupTable: "old_event"})
	if err != nil {
		t.Fatal(err)
	}
	want := "ALTER TABLE `old_event` ADD COLUMN handler VARBINARY(64) NOT NULL DEFAULT 'benefits' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (handler, event_id)"
	err = kit.CreateTables(ctx)
	if !errors.Is(err, consumer.ErrOldDedupTable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("CreateTables: %v", err)
	}
	_, err = kit.Handle(ctx, consumer.Message{EventID: "ev-new"}, grant(2))
	if !errors.Is(err, consumer.ErrOldDedupTable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Handle: %v", err)
	}
	for _, q := range kit.MigrationSQL() {
		if _, err := f.DB.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := kit.CreateTables(ctx); err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	for id, want := range map[string]consumer.Outcome{"ev-old": consumer.Duplicate, "ev-new": consumer.Processed} {
		if out, err := kit.Handle(ctx, consumer.Message{EventID: id}, grant(3)); err != nil || out != want {
			t.Fatalf("%s after the migration: %v, %v; want %v", id, out, err, want)
		}
	}
}
