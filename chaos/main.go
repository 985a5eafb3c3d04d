// Command chaos runs outboxd (the built binary) against a real MariaDB, kfake and the RocketMQ
// test broker while a seeded RNG injects faults: kill -9 and restarts of outboxd, MariaDB
// restarts and crashes, broker outages, broker error answers and TCP faults (drop, reset,
// latency, blackhole) on the paths outboxd→MariaDB and outboxd→Kafka. A generator commits
// outbox rows with per-key sequence numbers; a verifier checks that every committed row
// arrived, in per-key commit order, that no rolled-back row did, and counts duplicates.
// See chaos/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// envOr is the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	var o Options
	flag.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long to inject faults")
	flag.Float64Var(&o.Rate, "rate", 200, "outbox rows committed per second (about)")
	flag.Int64Var(&o.Seed, "seed", time.Now().UnixNano(), "RNG seed of the fault schedule and the generator")
	flag.StringVar(&o.Out, "out", "", "write the JSON report here, and the Markdown block next to it (.md)")
	flag.StringVar(&o.Outboxd, "outboxd", "", "outboxd binary (default: go build ./cmd/outboxd)")
	flag.DurationVar(&o.CatchUp, "catchup", 3*time.Minute, "bound on the final wait for outboxd to deliver everything")
	flag.DurationVar(&o.Gap, "gap", 1500*time.Millisecond, "mean pause between faults")
	flag.Float64Var(&o.HoldScale, "hold-scale", 1, "scale of how long each outage or degradation lasts")
	flag.IntVar(&o.Instances, "instances", 2, "outboxd instances: 1 runs one with a checkpoint file; 2 or more run with ha on and the mysql store, and add the leader faults")
	flag.DurationVar(&o.Lease, "lease", 2*time.Second, "ha.lease of the instances")
	flag.BoolVar(&o.Replicated, "replicated", true, "MariaDB is a primary and a GTID replica; outboxd reads source.addrs [both], and primary_failover and replica_kill9 join the faults")
	flag.StringVar(&o.Delivery, "delivery", envOr("CHAOS_DELIVERY", DeliveryAtLeastOnce),
		"outboxd's delivery mode: at_least_once, or exactly_once (every row to Kafka, the checkpoint in a Kafka transaction, a read_committed verifier that fails on any duplicate); default $CHAOS_DELIVERY")
	flag.BoolVar(&o.Verbose, "v", false, "log every fault")
	faults := flag.String("faults", "", "comma-separated fault kinds: only these are injected (default: every kind of the world)")
	flag.Parse()
	if *faults != "" {
		o.Faults = strings.Split(*faults, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	fmt.Println(string(js))
	fmt.Println(rep.Markdown())
	if o.Out != "" {
		if err := os.WriteFile(o.Out, append(js, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: write report: %v\n", err)
			os.Exit(2)
		}
		md := o.Out + ".md"
		if err := os.WriteFile(md, []byte(rep.Markdown()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: write report: %v\n", err)
			os.Exit(2)
		}
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
