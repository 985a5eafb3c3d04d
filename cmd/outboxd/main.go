// Command outboxd relays transactional-outbox rows from the MySQL/MariaDB binlog to Kafka and
// RocketMQ, checkpointing GTIDs only after the broker acknowledged them. This package only wires
// the other packages together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `outboxd relays outbox rows from the MySQL/MariaDB binlog to Kafka and RocketMQ.

Usage:
  outboxd run --config F [--from-gtid SET [--force]] [--dead-letter-event ID]...
                                                        stream and deliver until SIGTERM/SIGINT
  outboxd check --config F                              verify the server, privileges and sinks
  outboxd status --config F | --addr HOST:PORT [--json] show a running outboxd's state (from admin.listen)
  outboxd checkpoint show --config F                    print the saved checkpoint as JSON
  outboxd checkpoint set --config F --gtid SET [--force] replace the saved checkpoint
  outboxd health [--addr HOST:PORT] [--ready]           exit 0 if a running outboxd's admin server answers 200
  outboxd version                                       print the version
`

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	sig := handleSignals(os.Stderr, os.Exit)
	tuneGC()
	stopProfile := startProfile(os.Getenv("OUTBOXD_CPUPROFILE"))
	err := dispatch(sig.ctx, sig, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	sig.stop()
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintln(os.Stderr, "outboxd:", err)
	}
	os.Exit(code)
}

// errReported marks an error that was already logged in full.
var errReported = errors.New("reported")

// dispatch runs the command args names. sig, when not nil, is told the run command's logger.
func dispatch(ctx context.Context, sig *signals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: 2, err: errors.New("no command given")}
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, sig, args[1:], stderr)
	case "check":
		return cmdCheck(ctx, args[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, args[1:], stdout, stderr)
	case "health":
		return cmdHealth(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		if len(args) < 2 {
			return &exitError{code: 2, err: errors.New("checkpoint needs a subcommand: show or set")}
		}
		switch args[1] {
		case "show":
			return cmdCheckpointShow(args[2:], stdout)
		case "set":
			return cmdCheckpointSet(ctx, args[2:], stdout, stderr)
		}
		return &exitError{code: 2, err: fmt.Errorf("unknown checkpoint subcommand %q: want show or set", args[1])}
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "outboxd %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return &exitError{code: 2, err: fmt.Errorf("unknown command %q", args[0])}
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2, err: err}
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	return nil
}

func timeNow() time.Time { return time.Now().UTC() }

// startProfile writes a CPU profile to path until the returned func is called; for finding the
// hot path under `make bench` (OUTBOXD_CPUPROFILE=/tmp/cpu.prof). "" does nothing.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd: OUTBOXD_CPUPROFILE:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "outboxd: OUTBOXD_CPUPROFILE:", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// tuneGC trades memory the pipeline's capacity already bounds for less GC CPU: GOGC 200 unless
// the environment sets GOGC, and a soft memory limit of 256 MiB unless it sets GOMEMLIMIT, so
// the heap's growth stops well before the limit the README promises.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(256 << 20)
	}
}
