// Command outboxd-demo shows outboxd end to end with no Docker: a throwaway MariaDB, an
// in-process Kafka broker (kfake, the real Kafka protocol), the outboxd binary, a sample shop
// app that writes an order and its outbox row in one transaction, and a consumer that prints
// each event as it arrives with its end-to-end latency.
package main

import (
	"context"
	"errors"
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

	os.Exit(run(o))
}

// run runs the demo until SIGINT (Ctrl-C), SIGTERM or --duration and returns the exit code: 0
// after a clean stop, also when the signal came during start-up; 1 when the demo failed or
// outboxd did not stop cleanly. Ctrl-C thus ends `make demo` without an error from make.
func run(o demoOptions) int {
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx := sigCtx
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	o.Out = os.Stdout
	_, err := runDemo(ctx, o)
	switch {
	case err == nil:
		return 0
	case sigCtx.Err() != nil && !errors.Is(err, errOutboxd):
		// Stopped while still starting (MariaDB, the brokers, outboxd's first connection): what
		// failed is only the start-up the signal interrupted.
		fmt.Fprintln(os.Stdout, "demo    | stopped during start-up")
		return 0
	}
	fmt.Fprintln(os.Stderr, "outboxd-demo:", err)
	return 1
}
