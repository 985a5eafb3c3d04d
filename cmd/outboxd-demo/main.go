// Command outboxd-demo shows outboxd end to end with no Docker: a throwaway MariaDB, an
// in-process Kafka broker (kfake, the real Kafka protocol), the outboxd binary, a sample shop
// app that writes an order and its outbox row in one transaction, and a consumer that prints
// each event as it arrives with its end-to-end latency.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var o demoOptions
	flag.StringVar(&o.Outboxd, "outboxd", "bin/outboxd", "path to the outboxd binary")
	flag.DurationVar(&o.Duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	flag.DurationVar(&o.Every, "every", 700*time.Millisecond, "how often the sample app places an order")
	flag.IntVar(&o.KafkaPort, "kafka-port", 0, "kfake listen port on 127.0.0.1 (0: a free one)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	o.Out = os.Stdout
	if _, err := runDemo(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-demo:", err)
		os.Exit(1)
	}
}
