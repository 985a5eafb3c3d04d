// Package benefits is the example consumer of outboxd's events: it grants one benefit per paid
// order, effectively once, with the consumer kit (github.com/outboxd/outboxd/consumer) over a
// kafka-go Reader. `make demo` runs it; cmd/benefits is the same as a program of its own.
package benefits

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/consumer/kafkago"
)

// SchemaStatements create the business table, one benefit per order, if it does not exist.
// Its event_id column ties each row to its PROCESSED mark in the kit's dedup table. Pure.
func SchemaStatements() []string {
	return []string{`CREATE TABLE IF NOT EXISTS benefit (
  order_id     BIGINT         NOT NULL PRIMARY KEY,
  event_id     VARBINARY(255) NOT NULL,
  customer     VARCHAR(64)    NOT NULL,
  points       BIGINT         NOT NULL,
  granted_at   DATETIME(6)    NOT NULL,
  UNIQUE KEY uk_event_id (event_id)
) ENGINE = InnoDB`}
}

// paidOrder is what the work reads of an order.paid payload (internal/shop's Payload).
type paidOrder struct {
	OrderID     *int64 `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// Grant is the work for one paid-order event: a benefit row worth one point per 100 cents, in
// the kit's transaction. A payload that is not a paid order, and a second event for an order
// that already has its benefit, are permanent errors (the event is quarantined, not retried).
func Grant(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
	var o paidOrder
	if err := json.Unmarshal(msg.Payload, &o); err != nil {
		return consumer.Permanent(fmt.Errorf("payload is not a paid order: %w", err))
	}
	if o.OrderID == nil {
		return consumer.Permanent(errors.New("payload has no order_id"))
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO benefit (order_id, event_id, customer, points, granted_at) VALUES (?, ?, ?, ?, NOW(6))",
		*o.OrderID, msg.EventID, o.Customer, o.AmountCents/100)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		return consumer.Permanent(fmt.Errorf("order %d already has a benefit from another event: %w", *o.OrderID, err))
	}
	return err
}

// Config is what Run needs.
type Config struct {
	Brokers []string
	Topic   string // order.paid
	Group   string // the Kafka consumer group
	DB      *sql.DB
	// Log, if set, gets one line per message handled or failed.
	Log func(format string, args ...any)
}

// Setup creates the kit's tables and the benefit table if they do not exist. It blocks.
func Setup(ctx context.Context, db *sql.DB) (*consumer.Kit, error) {
	kit, err := consumer.New(db, consumer.Options{Handler: "benefits"})
	if err != nil {
		return nil, err
	}
	if err := kit.CreateTables(ctx); err != nil {
		return nil, err
	}
	for _, stmt := range SchemaStatements() {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create benefit table: %w", err)
		}
	}
	return kit, nil
}

// Run grants benefits for the paid orders of c.Topic until ctx is done, and returns ctx.Err().
// A failing reader (a lost connection, an offset commit refused across a rebalance) is closed
// and opened again after a second: what was handled but not committed is fetched again and
// found marked. It blocks.
func Run(ctx context.Context, c Config) error {
	kit, err := Setup(ctx, c.DB)
	if err != nil {
		return err
	}
	logf := c.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	for {
		err := runReader(ctx, c, kit, logf)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logf("reader failed, reopening in 1s: %v", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func runReader(ctx context.Context, c Config, kit *consumer.Kit, logf func(string, ...any)) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: c.Brokers, GroupID: c.Group, Topic: c.Topic,
		StartOffset: kafka.FirstOffset, MaxWait: 250 * time.Millisecond,
		// A killed member's partitions move on after SessionTimeout; a rebalance waits at most
		// RebalanceTimeout for the members to join again (kafka-go's default is 30 s).
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second, HeartbeatInterval: time.Second,
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) { logf("kafka: "+format, args...) }),
	})
	defer r.Close()
	return kafkago.Run(ctx, r, kit, Grant, kafkago.Options{
		Handled: func(m consumer.Message, out consumer.Outcome) {
			logf("%-9s %s event_id=%.8s… %s", out, m.MsgID, m.EventID, strings.TrimSpace(string(m.Payload)))
		},
		Failed: func(m consumer.Message, err error) { logf("retrying %s: %v", m.MsgID, err) },
	})
}
