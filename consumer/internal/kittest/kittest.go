// Package kittest gives the consumer kit's tests a database on a real MariaDB: one server per
// test binary, one database per test, with the kit's tables and a business table
// benefit(order_id PK, event_id).
package kittest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // OpenKit

	"github.com/outboxd/outboxd/consumer"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// Handler is the name of the tests' kit (Options.Handler).
const Handler = "benefits"

// DB is one test's database.
type DB struct {
	*sql.DB
	Kit *consumer.Kit
	DSN string // root's DSN for the database, for a child process
}

var (
	once   sync.Once
	srv    *mariadb.Server
	srvErr error
	n      atomic.Int64
)

// New returns a fresh database for t; it skips (fails with $CI set) without mariadbd. The
// server lives until the test binary exits.
func New(t *testing.T) *DB {
	t.Helper()
	mariadb.RequireT(t)
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, srvErr = mariadb.Start(ctx, mariadb.Options{})
	})
	if srvErr != nil {
		t.Fatalf("start MariaDB: %v", srvErr)
	}
	name := fmt.Sprintf("kit%d", n.Add(1))
	db, err := srv.DB(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	kit, err := consumer.New(db, consumer.Options{Handler: Handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := kit.CreateTables(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE benefit (order_id BIGINT PRIMARY KEY, event_id VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &DB{DB: db, Kit: kit, DSN: srv.RootDSN(name)}
}

// Count runs a COUNT query.
func (d *DB) Count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var c int
	if err := d.QueryRow(query, args...).Scan(&c); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return c
}

// Grant is the tests' business work: one benefit row for orderID.
func Grant(orderID int) consumer.Func {
	return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO benefit (order_id, event_id) VALUES (?, ?)", orderID, msg.EventID)
		return err
	}
}

// OpenKit opens a kit on dsn with the default tables, for a test's child process.
func OpenKit(dsn string) (*consumer.Kit, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	return consumer.New(db, consumer.Options{Handler: Handler})
}
