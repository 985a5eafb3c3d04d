package shop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/shop"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

var plan = shop.Plan{
	Created:   shop.Kind{Topic: "order.created", EventType: "OrderCreated"},
	Paid:      shop.Kind{Topic: "pay.succeeded", EventType: "PaymentSucceeded"},
	PaidEvery: 3,
}

func TestPlanOrder(t *testing.T) {
	var topics []string
	var customers []string
	for i := range 6 {
		o := plan.Order(i, fmt.Sprint("ev", i))
		topics = append(topics, o.Kind.Topic)
		customers = append(customers, o.Customer)
		if o.EventID != fmt.Sprint("ev", i) {
			t.Errorf("order %d: event id %q", i, o.EventID)
		}
	}
	wantTopics := "[order.created order.created pay.succeeded order.created order.created pay.succeeded]"
	if got := fmt.Sprint(topics); got != wantTopics {
		t.Errorf("topics = %s, want %s", got, wantTopics)
	}
	if got := fmt.Sprint(customers); got != "[alice bob carol dave erin alice]" {
		t.Errorf("customers = %s", got)
	}
	never := shop.Plan{Created: plan.Created, Customers: []string{"zed"}}
	for i := range 10 {
		if o := never.Order(i, "x"); o.Kind != plan.Created || o.Customer != "zed" {
			t.Fatalf("PaidEvery 0: order %d = %+v", i, o)
		}
	}
}

func TestPayloadIsJSON(t *testing.T) {
	o := shop.Order{Customer: `quote " and \ backslash`, AmountCents: 1234}
	var got struct {
		OrderID     int64  `json:"order_id"`
		Customer    string `json:"customer"`
		AmountCents int64  `json:"amount_cents"`
	}
	if err := json.Unmarshal([]byte(o.Payload(42)), &got); err != nil {
		t.Fatalf("payload %s: %v", o.Payload(42), err)
	}
	if got.OrderID != 42 || got.Customer != o.Customer || got.AmountCents != 1234 {
		t.Errorf("payload decoded to %+v", got)
	}
	if !json.Valid([]byte(shop.Headers)) {
		t.Errorf("Headers is not JSON: %s", shop.Headers)
	}
}

func TestRunAgainstMariaDB(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	ctx := t.Context()
	db, err := srv.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range shop.SchemaStatements() {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	var committed []shop.Order
	n, err := shop.Run(ctx, db, shop.RunOptions{
		Plan: plan, Every: time.Millisecond, Max: 4,
		Committed: func(o shop.Order, _ int64, _ time.Time) { committed = append(committed, o) },
		Failed:    func(o shop.Order, err error) { t.Errorf("order %+v failed: %v", o, err) },
	})
	if err != nil || n != 4 || len(committed) != 4 {
		t.Fatalf("Run = %d, %v; committed %d", n, err, len(committed))
	}
	rows, err := db.QueryContext(ctx, `SELECT e.event_id, e.biz_key, e.topic, e.event_type, e.payload, o.id, o.customer
		FROM outbox_event e JOIN orders o ON JSON_VALUE(e.payload, '$.order_id') = o.id ORDER BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var evID, key, topic, typ, payload, cust string
		var orderID int64
		if err := rows.Scan(&evID, &key, &topic, &typ, &payload, &orderID, &cust); err != nil {
			t.Fatal(err)
		}
		w := committed[i]
		if evID != w.EventID || key != w.Customer || cust != w.Customer || topic != w.Kind.Topic || typ != w.Kind.EventType {
			t.Errorf("row %d = %s %s %s %s (order of %s), want %+v", i, evID, key, topic, typ, cust, w)
		}
		if payload != w.Payload(orderID) {
			t.Errorf("row %d payload %s, want %s", i, payload, w.Payload(orderID))
		}
		i++
	}
	if i != 4 {
		t.Fatalf("joined %d order/event pairs, want 4", i)
	}

	// An outbox insert that fails (a duplicate event_id) must take its order with it: that is the
	// point of writing both in one transaction.
	dup := plan.Order(99, committed[0].EventID)
	if _, err := shop.Place(ctx, db, dup); err == nil {
		t.Fatal("Place with a duplicate event_id succeeded")
	}
	var orders int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 4 {
		t.Errorf("after the failed Place there are %d orders, want 4 (the order must roll back)", orders)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// A nil *sql.DB is never reached: the cancelled context ends Run before its first order.
	n, err := shop.Run(ctx, nil, shop.RunOptions{Plan: plan, Every: time.Hour})
	if n != 0 || err != nil {
		t.Errorf("Run on a cancelled context = %d, %v", n, err)
	}
	if _, err := shop.Run(t.Context(), nil, shop.RunOptions{Plan: plan}); err == nil {
		t.Error("Run with Every 0 did not fail")
	}
}
