// Command benefits is the example consumer (examples/benefits) as a program: it grants one
// benefit per paid order from a Kafka topic, effectively once, into a MySQL/MariaDB database.
//
//	benefits --brokers 127.0.0.1:9092 --topic order.paid --group benefits --dsn 'user:pass@tcp(127.0.0.1:3306)/benefits'
//
// The DSN may also come from $BENEFITS_DSN. SIGINT or SIGTERM stops it after the message in
// hand; SIGKILL loses nothing either (that is the point).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/examples/benefits"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated")
	topic := flag.String("topic", "order.paid", "the topic of paid-order events")
	group := flag.String("group", "benefits", "the Kafka consumer group")
	dsn := flag.String("dsn", os.Getenv("BENEFITS_DSN"), "go-sql-driver DSN of the benefits database (default $BENEFITS_DSN)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "benefits: --dsn (or $BENEFITS_DSN) is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benefits:", err)
		os.Exit(1)
	}
	defer db.Close()
	err = benefits.Run(ctx, benefits.Config{
		Brokers: strings.Split(*brokers, ","), Topic: *topic, Group: *group, DB: db,
		Log: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "benefits:", err)
		os.Exit(1)
	}
}
