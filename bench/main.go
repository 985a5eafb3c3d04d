// Command bench measures outboxd on this machine in one run: catch-up throughput against the
// go-mysql ceiling, steady-state latency, memory, a polling relay baseline and the RocketMQ sink,
// against a throwaway MariaDB, kfake and the RocketMQ test broker, with outboxd as the built
// binary in its own process. See bench/README.md.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

type options struct {
	Out           string
	Rows          int
	TxnSizes      []int
	Steady        time.Duration
	Rates         []int
	BaselineRates []int
	BaselineRows  int
	BigRows       int
	RMQRows       int
	RMQRate       int
	GenConns      int
	Reps          int
	Steady1Rates  []int
	Steady1Stamps bool
	Steady1Paired bool
	Steady1Floors []string
	PairedConns   int // the paired probe's generator connections
	Timeout       time.Duration
	Only          []string
	OutboxdExtra  string
	TmpDir        string
	Keep          bool
	Outboxd       string // a prebuilt binary; "" builds ./cmd/outboxd
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

var workloadNames = []string{"catchup", "ceiling", "floor", "steady", "steady1", "baseline", "memory", "rocketmq"}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.Out, "out", "bench/results", "directory for results.json, results.md and latency.png")
	fs.IntVar(&o.Rows, "rows", 1_000_000, "catch-up rows per transaction size (also the ceiling's)")
	txn := fs.String("txn-sizes", "1,100", "rows per transaction in the catch-up workloads")
	fs.DurationVar(&o.Steady, "steady", 20*time.Second, "duration of each steady-latency rate")
	rates := fs.String("rates", "300,3000,10000", "outboxd steady rates (commits/s, 1 row each)")
	brates := fs.String("baseline-rates", "300,3000", "polling relay steady rates")
	fs.IntVar(&o.BaselineRows, "baseline-rows", 100_000, "catch-up rows for the polling relay")
	fs.IntVar(&o.BigRows, "big-rows", 1_000_000, "rows in the single transaction of the memory workload")
	fs.IntVar(&o.RMQRows, "rmq-rows", 100_000, "catch-up rows through the RocketMQ sink")
	fs.IntVar(&o.RMQRate, "rmq-rate", 3000, "steady rate through the RocketMQ sink")
	fs.IntVar(&o.Reps, "reps", 3, "runs of each relay over the same catch-up rows, in rotating order; the tables show the median")
	fs.IntVar(&o.GenConns, "gen-conns", 8, "parallel connections writing the catch-up rows")
	s1rates := fs.String("steady1-rates", "3000", "rates of the single-connection steady probe (outboxd and the floor relay)")
	fs.BoolVar(&o.Steady1Paired, "steady1-paired", false, "also run outboxd and the -steady1-floors at once on the same single-connection commits (a diagnostic)")
	fs.IntVar(&o.PairedConns, "steady1-paired-conns", 1, "generator connections of the paired probe (more: compare with the several-connection steady pacing)")
	s1floors := fs.String("steady1-floors", floorFranz, "floor relays the paired probe runs beside outboxd: franz-go, kafka-go")
	fs.BoolVar(&o.Steady1Stamps, "steady1-stamps", true, "stamp each probe message along its path (binlog reader, broker) for the latency breakdown")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "overall deadline; everything is cleaned up after it")
	only := fs.String("only", "", "comma-separated subset of "+strings.Join(workloadNames, ","))
	fs.StringVar(&o.OutboxdExtra, "outboxd-extra", "", "YAML appended to the generated outboxd config (e.g. a pipeline: block)")
	fs.StringVar(&o.TmpDir, "tmp", "", "parent of the temporary directory (default $TMPDIR)")
	fs.StringVar(&o.Outboxd, "outboxd", "", "outboxd binary to measure (default: go build ./cmd/outboxd into the temp dir)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory (MariaDB datadir, outboxd logs)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.TxnSizes, err = parseInts(*txn); err != nil {
		return o, fmt.Errorf("-txn-sizes: %w", err)
	}
	if o.Rates, err = parseInts(*rates); err != nil {
		return o, fmt.Errorf("-rates: %w", err)
	}
	if o.BaselineRates, err = parseInts(*brates); err != nil {
		return o, fmt.Errorf("-baseline-rates: %w", err)
	}
	if o.Steady1Rates, err = parseInts(*s1rates); err != nil {
		return o, fmt.Errorf("-steady1-rates: %w", err)
	}
	for _, f := range strings.Split(*s1floors, ",") {
		if f = strings.TrimSpace(f); f != floorFranz && f != floorKafkaGo {
			return o, fmt.Errorf("-steady1-floors: %q is not %s or %s", f, floorFranz, floorKafkaGo)
		}
		o.Steady1Floors = append(o.Steady1Floors, f)
	}
	for _, w := range strings.Split(*only, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if !slices.Contains(workloadNames, w) {
			return o, fmt.Errorf("-only: unknown workload %q (have %s)", w, strings.Join(workloadNames, ","))
		}
		o.Only = append(o.Only, w)
	}
	if o.Rows <= 0 || o.BaselineRows <= 0 || o.BigRows <= 0 || o.RMQRows <= 0 || o.RMQRate <= 0 || o.GenConns <= 0 || o.Reps <= 0 || o.Steady <= 0 || o.PairedConns <= 0 {
		return o, errors.New("-rows, -baseline-rows, -big-rows, -rmq-rows, -rmq-rate, -gen-conns, -steady and -steady1-paired-conns must be positive")
	}
	return o, nil
}

func (o options) want(name string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, name) }

func main() {
	if topic := os.Getenv(kfakeEnv); topic != "" {
		os.Exit(serveKfake(topic))
	}
	if cfg := os.Getenv(floorEnv); cfg != "" {
		os.Exit(serveFloor(cfg))
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	code := run(ctx, o)
	cancel()
	stop()
	os.Exit(code)
}

// harness holds what every workload shares.
type harness struct {
	o     options
	repo  string
	tmp   string
	bin   string
	srv   *mariadb.Server
	root  *sql.DB // SHOW STATUS and positions; not counted as generator statements
	gen   *sql.DB // generators: client-side interpolation, one statement per Exec
	dbPID int
	epoch time.Time // the monotonic origin of commit and receive stamps
	res   *Results
	ids   int // server_id counter for replication clients
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options) int {
	began := time.Now()
	repo, err := os.Getwd()
	if err != nil {
		logf("%v", err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(repo, "cmd", "outboxd")); err != nil {
		logf("run from the repository root (no cmd/outboxd in %s)", repo)
		return 2
	}
	tmp, err := os.MkdirTemp(o.TmpDir, "outboxd-bench-")
	if err != nil {
		logf("temp dir: %v", err)
		return 1
	}
	if o.Keep {
		logf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	h := &harness{o: o, repo: repo, tmp: tmp, epoch: time.Now(), ids: 7000}
	h.res = &Results{Params: Params{
		Rows: o.Rows, TxnSizes: o.TxnSizes, Steady: o.Steady.String(), Rates: o.Rates,
		BaselineRates: o.BaselineRates, BaselineRows: o.BaselineRows, BigRows: o.BigRows,
		RMQRows: o.RMQRows, RMQRate: o.RMQRate, GenConns: o.GenConns, Reps: o.Reps, Only: o.Only, Steady1Rates: o.Steady1Rates,
		OutboxdExtra: o.OutboxdExtra, PayloadBytes: payloadBytes, DistinctKeys: distinctKeys,
		Partitions: benchPartitions, RMQQueues: rmqQueues, OutboxdBinary: "built from ./cmd/outboxd",
	}}
	if o.Outboxd != "" {
		h.res.Params.OutboxdBinary = o.Outboxd
	}
	if o.Steady1Paired {
		h.res.Params.PairedConns = o.PairedConns
	}
	if err := h.setup(ctx); err != nil {
		logf("setup: %v", err)
		h.teardown()
		return 1
	}
	h.res.Machine = machineInfo(ctx, repo, h.root)
	h.workloads(ctx)
	h.teardown()

	h.res.TotalSeconds = time.Since(began).Seconds()
	h.res.computeRatios()
	if err := writeResults(o.Out, h.res); err != nil {
		logf("%v", err)
		return 1
	}
	rate := 3000
	if !slices.Contains(o.Rates, rate) && len(o.Rates) > 0 {
		rate = o.Rates[0]
	}
	if err := plotLatency(filepath.Join(o.Out, "latency.png"), h.res, rate); err != nil {
		logf("%v", err)
	}
	fmt.Print(h.res.markdown())
	logf("wrote %s/results.json, results.md, latency.png in %s", o.Out, time.Since(began).Round(time.Second))
	if len(h.res.Errors) > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

// setup builds outboxd and starts MariaDB with the bench schema.
func (h *harness) setup(ctx context.Context) error {
	if h.o.Outboxd != "" {
		abs, err := filepath.Abs(h.o.Outboxd)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("-outboxd: %w", err)
		}
		h.bin = abs
	} else {
		logf("building outboxd")
		bin, err := buildOutboxd(ctx, h.repo, h.tmp)
		if err != nil {
			return err
		}
		h.bin = bin
	}
	logf("starting MariaDB")
	var err error
	h.srv, err = mariadb.Start(ctx, mariadb.Options{
		Dir: filepath.Join(h.tmp, "mariadb"),
		// The defaults (32M buffer pool, 8M redo log) suit tests, not gigabytes of rows.
		ExtraArgs: []string{
			"--innodb-buffer-pool-size=1G",
			"--innodb-log-file-size=512M",
			"--max-allowed-packet=64M",
			"--binlog-cache-size=4M",
			"--max-connections=500",
		},
	})
	if err != nil {
		return err
	}
	if h.root, err = h.srv.DB(ctx, ""); err != nil {
		return err
	}
	for _, q := range schemaSQL {
		if _, err := h.root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create bench schema: %w", err)
		}
	}
	if h.gen, err = openGenDB(h.srv.RootDSN(benchSchema), 32); err != nil {
		return err
	}
	if h.dbPID, err = mariadbPID(h.srv.Dir); err != nil {
		logf("no MariaDB CPU figures: %v", err)
	}
	return nil
}

func (h *harness) teardown() {
	if h.gen != nil {
		h.gen.Close()
	}
	if h.root != nil {
		h.root.Close()
	}
	if h.srv != nil {
		logf("stopping MariaDB")
		if err := h.srv.Close(); err != nil {
			logf("stop MariaDB: %v", err)
		}
	}
}

// record appends w, logging it and keeping its error.
func (h *harness) record(w Workload) {
	if w.Error != "" {
		h.res.Errors = append(h.res.Errors, w.Name+": "+w.Error)
		logf("%s: FAILED: %s", w.Name, w.Error)
	} else {
		logf("%s: done (%s events/s)", w.Name, num(w.EventsPerSec, 0))
	}
	h.res.Workloads = append(h.res.Workloads, w)
}

func (h *harness) serverID() int {
	h.ids++
	return h.ids
}

func (h *harness) workloads(ctx context.Context) {
	if h.o.want("catchup") || h.o.want("ceiling") || h.o.want("floor") {
		for _, n := range h.o.TxnSizes {
			if ctx.Err() != nil {
				return
			}
			h.catchUpWithCeiling(ctx, n)
		}
	}
	if h.o.want("steady") && ctx.Err() == nil {
		h.steadyOutboxd(ctx, "kafka", h.o.Rates)
	}
	if h.o.want("steady") && ctx.Err() == nil {
		h.steadyOutboxd(ctx, "kafka-eos", h.o.Rates)
	}
	if h.o.want("baseline") && ctx.Err() == nil {
		h.baselineCatchUp(ctx)
		for _, iv := range []time.Duration{time.Second, 10 * time.Millisecond} {
			if ctx.Err() == nil {
				h.steadyPoller(ctx, iv)
			}
		}
	}
	if h.o.want("memory") && ctx.Err() == nil {
		h.memory(ctx)
	}
	if h.o.want("steady1") && ctx.Err() == nil {
		h.steadyOne(ctx)
	}
	if (h.o.want("rocketmq") || h.o.want("floor")) && ctx.Err() == nil {
		h.rocketMQ(ctx)
	}
	if ctx.Err() != nil {
		h.res.Errors = append(h.res.Errors, "run cut short: "+ctx.Err().Error())
	}
	runtime.GC()
}
