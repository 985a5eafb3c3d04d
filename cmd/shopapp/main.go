// Command shopapp is the sample application of the docker-compose stack: every -every it places
// an order and writes its outbox event in the same MySQL transaction. Orders emit order.created
// (routed to Kafka), every third one pay.succeeded (routed to RocketMQ).
//
// The connection comes from $SHOPAPP_DSN (a go-sql-driver DSN), or else from -addr, -user,
// -database and $SHOPAPP_MYSQL_PASSWORD; the password is read only from the environment so it
// never shows in a process list.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/internal/shop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shopapp:", err)
		os.Exit(1)
	}
}

// options are shopapp's settings after flags and environment.
type options struct {
	DSN      string
	Every    time.Duration
	Max      int
	WaitDB   time.Duration
	PaidEach int
}

// parseOptions reads flags from args and the rest from getenv. Pure apart from getenv.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	defEvery := time.Second
	if v := getenv("SHOPAPP_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return options{}, fmt.Errorf("SHOPAPP_EVERY: %w (use a duration such as 500ms)", err)
		}
		defEvery = d
	}
	fs := flag.NewFlagSet("shopapp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	every := fs.Duration("every", defEvery, "time between orders ($SHOPAPP_EVERY)")
	maxOrders := fs.Int("max", 0, "stop after this many orders; 0 runs until SIGTERM")
	paid := fs.Int("paid-every", 3, "every n-th order is a payment (pay.succeeded); 0 never")
	wait := fs.Duration("wait-db", time.Minute, "how long to wait for the database at startup")
	addr := fs.String("addr", envOr(getenv, "SHOPAPP_MYSQL_ADDR", "127.0.0.1:3306"), "MySQL host:port ($SHOPAPP_MYSQL_ADDR)")
	user := fs.String("user", envOr(getenv, "SHOPAPP_MYSQL_USER", "shopapp"), "MySQL user ($SHOPAPP_MYSQL_USER)")
	db := fs.String("database", envOr(getenv, "SHOPAPP_MYSQL_DATABASE", "shop"), "database holding orders and outbox_event")
	if err := fs.Parse(args); err != nil {
		return options{}, fmt.Errorf("%w (flags: -every, -max, -paid-every, -wait-db, -addr, -user, -database)", err)
	}
	if *every <= 0 {
		return options{}, fmt.Errorf("-every must be positive, got %s", *every)
	}
	if *paid < 0 || *maxOrders < 0 {
		return options{}, errors.New("-paid-every and -max must not be negative")
	}
	o := options{DSN: getenv("SHOPAPP_DSN"), Every: *every, Max: *maxOrders, WaitDB: *wait, PaidEach: *paid}
	if o.DSN == "" {
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.User, cfg.DBName = "tcp", *addr, *user, *db
		cfg.Passwd = getenv("SHOPAPP_MYSQL_PASSWORD")
		o.DSN = cfg.FormatDSN()
	}
	// utf8mb4 and its collation, or a server may fall back to latin1 and double-encode UTF-8.
	cfg, err := mysql.ParseDSN(o.DSN)
	if err != nil {
		return options{}, fmt.Errorf("SHOPAPP_DSN: %w", err)
	}
	if err := mysql.Charset("utf8mb4", "utf8mb4_general_ci")(cfg); err != nil {
		return options{}, fmt.Errorf("set charset: %w", err)
	}
	o.DSN = cfg.FormatDSN()
	return o, nil
}

func (o options) plan() shop.Plan {
	return shop.Plan{
		Created:   shop.Kind{Topic: "order.created", EventType: "OrderCreated"},
		Paid:      shop.Kind{Topic: "pay.succeeded", EventType: "PaymentSucceeded"},
		PaidEvery: o.PaidEach,
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	o, err := parseOptions(args, getenv)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", o.DSN)
	if err != nil {
		return fmt.Errorf("open MySQL: %w", err)
	}
	defer db.Close()
	if err := waitForDB(ctx, db, o.WaitDB); err != nil {
		return err
	}
	fmt.Fprintf(out, "shopapp: placing an order every %s\n", o.Every)
	n, err := shop.Run(ctx, db, shop.RunOptions{
		Plan: o.plan(), Every: o.Every, Max: o.Max,
		Committed: func(ord shop.Order, id int64, _ time.Time) {
			fmt.Fprintf(out, "order %d %-6s %-14s event_id=%s\n", id, ord.Customer, ord.Kind.Topic, ord.EventID)
		},
		Failed: func(ord shop.Order, err error) { fmt.Fprintf(out, "order for %s failed: %v\n", ord.Customer, err) },
	})
	fmt.Fprintf(out, "shopapp: %d orders committed\n", n)
	return err
}

// waitForDB pings until the server answers, for up to wait: in compose the database may still
// be initialising. It blocks; it returns the last ping error when wait runs out.
func waitForDB(ctx context.Context, db *sql.DB, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("MySQL did not answer within %s: %w", wait, err)
		case <-time.After(time.Second):
		}
	}
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
