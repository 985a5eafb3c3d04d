// Package shop is the sample application of the demo and the docker-compose stack: it places an
// order and writes its outbox event in one database transaction, the pattern outboxd relays.
package shop

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/internal/outboxtable"
)

// SchemaStatements returns the statements that create the shop's tables in the current
// database, one statement each, for drivers that run one at a time. Pure.
func SchemaStatements() []string {
	return []string{`
CREATE TABLE orders (
  id           BIGINT PRIMARY KEY AUTO_INCREMENT,
  customer     VARCHAR(64) NOT NULL,
  amount_cents BIGINT NOT NULL,
  status       VARCHAR(16) NOT NULL,
  created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`, outboxtable.DDL("outbox_event")}
}

// defaultCustomers are the customers a Plan takes turns with when it names none.
func defaultCustomers() []string { return []string{"alice", "bob", "carol", "dave", "erin"} }

// Kind is what an order's outbox event says: its logical topic and its event type.
type Kind struct {
	Topic     string
	EventType string
}

// Plan is the deterministic sequence of orders a shop places.
type Plan struct {
	// Customers take turns; empty means alice, bob, carol, dave and erin. Each customer is an event key, so
	// their events stay in order.
	Customers []string
	// Created is the event of an ordinary order, such as order.created / OrderCreated.
	Created Kind
	// Paid is the event of every PaidEvery-th order (i%PaidEvery == PaidEvery-1), such as
	// pay.succeeded / PaymentSucceeded. PaidEvery <= 0 means never.
	Paid      Kind
	PaidEvery int
}

// Order is one order and its outbox event.
type Order struct {
	EventID     string
	Customer    string
	AmountCents int64
	Kind        Kind
}

// Order returns the i-th order (i >= 0) of the plan with the given event id. Pure; safe for
// concurrent use.
func (p Plan) Order(i int, eventID string) Order {
	customers := p.Customers
	if len(customers) == 0 {
		customers = defaultCustomers()
	}
	k := p.Created
	if p.PaidEvery > 0 && i%p.PaidEvery == p.PaidEvery-1 {
		k = p.Paid
	}
	return Order{EventID: eventID, Customer: customers[i%len(customers)], AmountCents: int64(1000 + i*7), Kind: k}
}

// Payload is the event's JSON payload for the order with the given database id. Pure.
func (o Order) Payload(orderID int64) string {
	b, _ := json.Marshal(struct {
		OrderID     int64  `json:"order_id"`
		Customer    string `json:"customer"`
		AmountCents int64  `json:"amount_cents"`
	}{orderID, o.Customer, o.AmountCents}) // cannot fail: fixed struct of plain fields
	return string(b)
}

// Headers is the event's extra headers, a JSON object outboxd copies onto the message.
const Headers = `{"source": "shop-app", "schema_version": 1}`

// Place inserts the order into orders and its event into outbox_event, in one transaction of db
// (whose current database holds both tables), and returns the order's id. It blocks until the
// commit returns and is safe for concurrent use. On error the transaction is rolled back, so
// neither row exists, unless the commit itself failed with an unknown outcome.
func Place(ctx context.Context, db *sql.DB, o Order) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin order for %s: %w", o.Customer, err)
	}
	defer tx.Rollback() // a no-op after Commit
	r, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'NEW')`,
		o.Customer, o.AmountCents)
	if err != nil {
		return 0, fmt.Errorf("insert order for %s: %w", o.Customer, err)
	}
	id, err := r.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("order id for %s: %w", o.Customer, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO outbox_event (event_id, biz_key, topic, event_type, payload, headers) VALUES (?, ?, ?, ?, ?, ?)`,
		o.EventID, o.Customer, o.Kind.Topic, o.Kind.EventType, o.Payload(id), Headers); err != nil {
		return 0, fmt.Errorf("insert outbox event %s (topic %s): %w", o.EventID, o.Kind.Topic, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit order %d (event %s): %w", id, o.EventID, err)
	}
	return id, nil
}

// RunOptions configures Run.
type RunOptions struct {
	Plan  Plan
	Every time.Duration // time between orders; must be positive
	// Max stops Run after this many committed orders; 0 means until ctx is done.
	Max int
	// Committed, if set, is called after each commit, from Run's goroutine.
	Committed func(o Order, orderID int64, at time.Time)
	// Failed, if set, is called with each failed order's error, from Run's goroutine.
	Failed func(o Order, err error)
	// NewEventID makes event ids; nil means NewEventID.
	NewEventID func() string
}

// Run places one order of the plan every o.Every until ctx is done or o.Max orders committed,
// and returns how many committed. It blocks. A failed order is reported to o.Failed and skipped:
// the shop keeps selling while the database is briefly away.
func Run(ctx context.Context, db *sql.DB, o RunOptions) (int, error) {
	if o.Every <= 0 {
		return 0, fmt.Errorf("order interval must be positive, got %s", o.Every)
	}
	newID := o.NewEventID
	if newID == nil {
		newID = NewEventID
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	n := 0
	for i := 0; o.Max == 0 || n < o.Max; i++ {
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		ord := o.Plan.Order(i, newID())
		id, err := Place(ctx, db, ord)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			if o.Failed != nil {
				o.Failed(ord, err)
			}
			continue
		}
		n++
		if o.Committed != nil {
			o.Committed(ord, id, time.Now())
		}
	}
	return n, nil
}

// NewEventID returns 32 random hex digits. Safe for concurrent use.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return hex.EncodeToString(b[:])
}
