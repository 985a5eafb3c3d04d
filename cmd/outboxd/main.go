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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
)

// version and commit are set at build time with -ldflags "-X main.version=… -X main.commit=…"
// (make build and make release do, from internal/release's LDFlags).
var (
	version = "dev"
	commit  = ""
)

const usage = `outboxd relays outbox rows from the MySQL/MariaDB binlog to Kafka and RocketMQ.

Usage:
  outboxd run [--config F] [--from-gtid SET [--force]] [--dead-letter-event ID]...
                                          stream and deliver until SIGTERM/SIGINT
  outboxd check [--config F] [--json]     verify the server, privileges, tables, sinks and topics
  outboxd status [--config F | --addr HOST:PORT] [--json]
                                          show a running outboxd's state (from admin.listen)
  outboxd checkpoint show [--config F]    print the saved checkpoint as JSON
  outboxd checkpoint set [--config F] (--gtid SET [--force] | --from-checkpoint) [--accept-layout] [--ignore-leader]
                                          replace the saved checkpoint
  outboxd checkpoint migrate [--config F] (--from-file PATH | --from-config OLD) [--overwrite] [--force] [--ignore-leader]
                                          copy a checkpoint file into the mysql store
  outboxd checkpoint import [--config F] --from debezium|maxwell|canal [--file PATH | --offsets-topic T
                  [--kafka-sink S]] [--connector NAME] [--client-id ID] [--maxwell-schema S]
                  [--server-id N] [--binlog-gtid-pos] [--overwrite] [--force] [--ignore-leader]
                                          turn Debezium's, Maxwell's or Canal's saved position
                                          into the checkpoint
  outboxd backfill [--config F] --table T [--where COND] [--batch N] [--dry-run] [--overwrite]
                  [--ignore-leader] [--no-lock] [--lock-wait D] [--dead-letter-event ID]...
                                          send rows already in the table at one snapshot, then
                                          set the checkpoint to that snapshot
  outboxd reconcile [--config F] --since T --until T [--slack D] [--json] [--out FILE]
                                          check that the window's rows reached their topics
  outboxd health [--config F | --addr HOST:PORT] [--ready] [--timeout D]
                                          exit 0 if a running outboxd's admin server answers 200
  outboxd version                         print the version
  outboxd help [COMMAND]                  print this, or a command's usage (as COMMAND --help)

--config defaults to $OUTBOXD_CONFIG; a --config flag wins over it.
`

// commands describes each command for its --help: its synopsis and what it does. The flags are
// listed from the command's flag set.
var commands = map[string]struct{ synopsis, about string }{
	"run": {"outboxd run [--config F] [--from-gtid SET [--force]] [--dead-letter-event ID]...",
		`Streams the configured outbox tables from the binlog and delivers each row to its sink until
SIGTERM or SIGINT; then drains what is in flight, saves the checkpoint and exits 0 (a second
signal exits 3 at once; the same signal again within 500 ms, as GNU timeout delivers it to the
process and to its group, is the same stop). Nothing is reloaded while it runs (SIGHUP is ignored): restart it to
apply a config change. Exits 2 on a bad config or flag, 1 on any other error.`},
	"check": {"outboxd check [--config F] [--json]",
		`Verifies the source server's settings, the account's privileges, every outbox table and its
columns, the mysql checkpoint store's table and grants (checkpoint.store: mysql), every sink
and each destination topic without placeholders, and prints one line per
check: OK, WARN or FAIL with what to change. --json prints the same as one JSON object
{"ok", "problems", "warnings", "verified"} (see docs/reference/cli-guide.md). Exits 0 when nothing failed, 1 when
something did, 2 on a bad config or flag.`},
	"status": {"outboxd status [--config F | --addr HOST:PORT] [--json]",
		`Prints a running outboxd's state from its admin server: --addr, else admin.listen from the
config, else 127.0.0.1:9120 (outboxd's default admin.listen). --addr wins over $OUTBOXD_CONFIG,
not over an explicit --config (give one of them).`},
	"checkpoint": {"outboxd checkpoint show [--config F]\n       outboxd checkpoint set [--config F] (--gtid SET [--force] | --from-checkpoint) [--accept-layout] [--ignore-leader]\n       outboxd checkpoint migrate [--config F] (--from-file PATH | --from-config OLD) [--overwrite] [--force] [--ignore-leader]\n       outboxd checkpoint import [--config F] --from debezium|maxwell|canal [--file PATH | --offsets-topic T [--kafka-sink S]] [--connector NAME] [--client-id ID] [--maxwell-schema S] [--server-id N] [--binlog-gtid-pos] [--overwrite] [--force] [--ignore-leader]",
		`show prints the saved checkpoint as JSON; set replaces it (while no outboxd runs on it);
migrate copies a checkpoint between the file, mysql and kafka stores; import turns
the position Debezium, Maxwell or Canal saved into the checkpoint.
"outboxd checkpoint show --help" (and set, migrate, import) list their flags;
--config defaults to $OUTBOXD_CONFIG.`},
	"checkpoint show": {"outboxd checkpoint show [--config F]",
		`Prints the saved checkpoint as JSON: checkpoint.path (it then reads no secrets and connects
to nothing) or, with checkpoint.store: mysql, the row of checkpoint.name read from
checkpoint.writer_addr. Exits 1 when there is no checkpoint yet.`},
	"checkpoint set": {"outboxd checkpoint set [--config F] (--gtid SET [--force] | --from-checkpoint) [--accept-layout] [--ignore-leader]",
		`Replaces the saved checkpoint with the executed GTID set SET, after checking it against the
source (the server must still have every transaction after it; --force skips that). It fails
while an outboxd runs on the same checkpoint file. With checkpoint.store: mysql it writes the
row of checkpoint.name and takes the row over (its epoch moves): it refuses while an outboxd
holds the leader lock (ha) unless --ignore-leader, and an outboxd still running on the row is
superseded at its next save and exits without writing over the new position.
--accept-layout records the outbox tables' current column layouts with the checkpoint (alone,
it keeps the saved position): the way on after outboxd refused to start because a table was
altered since the checkpoint and the binlog has no column names (binlog_row_metadata not FULL).
Use it only when no rows were written to the table between the checkpoint and the ALTER, or
after relaying them with the old layout: rows of the old layout would be read onto the wrong
columns.`},
	"checkpoint migrate": {"outboxd checkpoint migrate [--config F] (--from-file PATH | --from-config OLD) [--overwrite] [--force] [--ignore-leader]",
		`Copies a checkpoint into the store of the config: the file PATH (the old checkpoint.path) into
the mysql or kafka store, or the checkpoint of the old config OLD's store (file, mysql or
kafka) into any other, e.g. to turn delivery: exactly_once on (into checkpoint.store: kafka)
or off again. It checks the position against the source as set does (--force skips that) and
refuses when the store already holds a checkpoint unless --overwrite. Stop the outboxd that
used the old store first (a file's lock is taken while copying; writing the kafka store fences
its transactional id), then start it with the new config.`},
	"checkpoint import": {"outboxd checkpoint import [--config F] --from debezium|maxwell|canal [--file PATH | --offsets-topic T [--kafka-sink S]] [--connector NAME] [--client-id ID] [--maxwell-schema S] [--server-id N] [--binlog-gtid-pos] [--overwrite] [--force] [--ignore-leader]",
		`Turns the position another relay saved into the checkpoint, for moving over from it: stop
the tool, import its position, start outboxd. --from debezium reads --file holding the
connector's offset records (key and value JSON, as a dump of the offsets topic prints them; the
last record of --connector wins) or Kafka Connect's answer to GET /connectors/<name>/offsets,
or reads --connector's records from Kafka Connect's offsets topic --offsets-topic on the config's
Kafka sink (--kafka-sink); --from maxwell reads the row of --client-id in
--maxwell-schema's positions table on the source; --from canal reads --file holding meta.dat
or the ZooKeeper cursor node's content (--client-id picks a client). The saved GTID set becomes
the checkpoint: each tool saves the set through the last transaction it delivered in full, so
nothing is skipped; a transaction Debezium had partly emitted is sent again. A position without
a GTID set is refused with how to get one; on MariaDB, --binlog-gtid-pos takes the GTID state at
Debezium's file and pos from the server (BINLOG_GTID_POS). The set is checked against the source
as checkpoint set does (--force skips that); it refuses while an outboxd runs on the checkpoint
(--ignore-leader as for set) and when a checkpoint exists unless --overwrite. Exits 0 when
written, 1 when refused, 2 on a bad config or flag.`},
	"backfill": {"outboxd backfill [--config F] --table T [--where COND] [--batch N] [--dry-run] [--overwrite] [--ignore-leader] [--no-lock] [--lock-wait D] [--dead-letter-event ID]...",
		`Sends the rows already in outbox table T that the binlog will not deliver (rows from before
outboxd, a polling relay's PENDING rows): it reads the rows matching COND at one consistent
snapshot on the primary (checkpoint.writer_addr, default source.addr), in primary-key order,
sends them through the configured routes and sinks as run does (on_poison and
--dead-letter-event apply; every send is acknowledged by the broker), and then sets the checkpoint to the snapshot's GTID position,
so run goes on with exactly the transactions after it. It refuses while an outboxd runs on the
checkpoint (file lock; leader lock with checkpoint.store: mysql unless --ignore-leader) and when
a checkpoint exists unless --overwrite. On any failure the checkpoint is not changed: run the
backfill again (rows sent before are sent again). MySQL 8.4+ needs BACKUP_ADMIN, older MySQL
(or without it) RELOAD for a brief FLUSH TABLES WITH READ LOCK (see docs/operations/backfill.md). Exits 0 when done, 1 on an error, 2 on a
bad config or flag.`},
	"reconcile": {"outboxd reconcile [--config F] --since T --until T [--slack D] [--json] [--out FILE]",
		`For the outbox rows still in the tables whose tables[].columns.created_at is in [since, until),
routes each row as run does and checks that its event_id reached that sink and topic: Kafka
partitions are read by record time, RocketMQ queues by store time, over the window widened by
--slack on each side. A time is RFC 3339 (2026-12-01T10:00:00Z), now, or a duration from now
(-1h). Prints a summary and the missing and duplicated event ids (--json: one JSON object, see
docs/operations/reconcile.md; --out also writes it to a file). Rows under on_poison: dead_letter that are not at
their topic are looked for in the dead-letter topic. It writes nothing: SELECT on the tables,
Kafka Describe and Read on the topics, RocketMQ pulls that commit no offset. Pick an until
older than the relay's lag: rows not yet delivered count as missing. Exits 0 when nothing is
missing (duplicates allowed), 1 when something is, 2 on a bad config or flag.`},
	"health": {"outboxd health [--config F | --addr HOST:PORT] [--ready] [--timeout D]",
		`Probes a running outboxd's admin server and exits 0 when it answers 200, 1 otherwise (not
listening, timeout, any other status); 2 on a bad config or flag. The address is chosen as
status chooses it: --addr, else admin.listen from the config, else 127.0.0.1:9120. For container
healthchecks: the image is distroless, with no shell or curl.`},
	"version": {"outboxd version", `Prints the version, the commit it was built from (when known), the Go version and the platform.`},
}

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
	stopProfile := startProfile(profilePath("OUTBOXD_CPUPROFILE"), profilePath("OUTBOXD_MEMPROFILE"), profilePath("OUTBOXD_BLOCKPROFILE"))
	err := dispatch(sig.ctx, sig, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	sig.stop()
	if err == nil {
		return
	}
	os.Exit(report(os.Stderr, err))
}

// report prints err for the user unless it was logged already, then a stop error's fix on its
// own line (the log has it in the fix field, where a reader of the terminal may miss it), and
// returns the process exit code: an exitError's code, else 1.
func report(w io.Writer, err error) int {
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintln(w, "outboxd:", err)
	}
	if fix := binlog.FixOf(err); fix != "" {
		fmt.Fprintln(w, "outboxd: fix:", fix)
	}
	return code
}

// errReported marks an error that was already logged in full.
var errReported = errors.New("reported")

// logFailure logs err at error level with msg, and a stop error's fix as its own field, fix.
func logFailure(log zerolog.Logger, err error, msg string) {
	ev := log.Error().Err(err)
	if fix := binlog.FixOf(err); fix != "" {
		ev = ev.Str("fix", fix)
	}
	ev.Msg(msg)
}

// dispatch runs the command args names. sig, when not nil, is told the run command's logger.
// A command's --help or -h prints its usage to stdout and returns nil; a bad flag prints the
// usage to stderr and returns an exitError with code 2.
func dispatch(ctx context.Context, sig *signals, args []string, stdout, stderr io.Writer) error {
	err := dispatchCommand(ctx, sig, args, stdout, stderr)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

func dispatchCommand(ctx context.Context, sig *signals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: 2, err: errors.New("no command given")}
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, sig, args[1:], stdout, stderr)
	case "check":
		return cmdCheck(ctx, args[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, args[1:], stdout, stderr)
	case "backfill":
		return cmdBackfill(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return cmdReconcile(ctx, args[1:], stdout, stderr)
	case "health":
		return cmdHealth(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		if len(args) < 2 {
			printUsage(stderr, "checkpoint", nil)
			return &exitError{code: 2, err: errors.New("checkpoint needs a subcommand: show, set, migrate or import")}
		}
		switch args[1] {
		case "show":
			return cmdCheckpointShow(ctx, args[2:], stdout, stderr)
		case "set":
			return cmdCheckpointSet(ctx, args[2:], stdout, stderr)
		case "migrate":
			return cmdCheckpointMigrate(ctx, args[2:], stdout, stderr)
		case "import":
			return cmdCheckpointImport(ctx, args[2:], stdout, stderr)
		case "-h", "-help", "--help", "help":
			printUsage(stdout, "checkpoint", nil)
			return nil
		}
		printUsage(stderr, "checkpoint", nil)
		return &exitError{code: 2, err: fmt.Errorf("unknown checkpoint subcommand %q: want show, set, migrate or import", args[1])}
	case "version", "--version", "-version":
		fs := newFlags("version", stdout, stderr)
		if err := fs.parse(args[1:]); err != nil {
			return err
		}
		built := ""
		if c := buildCommit(); c != "" {
			built = "commit " + c + ", "
		}
		fmt.Fprintf(stdout, "outboxd %s (%s%s %s/%s)\n", version, built, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			// "help run" is "run --help".
			return dispatchCommand(ctx, sig, append(slices.Clone(args[1:]), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return &exitError{code: 2, err: fmt.Errorf("unknown command %q", args[0])}
}

// errHelp: the command printed its usage for --help; dispatch returns nil for it.
var errHelp = errors.New("help requested")

// cmdFlags is a command's flag set, with where its --help goes.
type cmdFlags struct {
	*flag.FlagSet
	name           string
	stdout, stderr io.Writer
}

// newFlags returns a command's flag set; it returns errors instead of exiting or printing them
// (main prints the error after parse printed the usage).
func newFlags(name string, stdout, stderr io.Writer) cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return cmdFlags{FlagSet: fs, name: name, stdout: stdout, stderr: stderr}
}

// parse parses args. --help or -h prints the usage to stdout and returns errHelp; a bad flag or
// an argument prints the usage to stderr and returns an exitError with code 2.
func (f cmdFlags) parse(args []string) error {
	err := f.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(f.stdout, f.name, f.FlagSet)
		return errHelp
	case err != nil:
		printUsage(f.stderr, f.name, f.FlagSet)
		return &exitError{code: 2, err: err}
	case f.NArg() > 0:
		printUsage(f.stderr, f.name, f.FlagSet)
		return &exitError{code: 2, err: fmt.Errorf("unexpected arguments: %v", f.Args())}
	}
	return nil
}

// printUsage writes command name's usage, with the flags of fs (nil for none), to w.
func printUsage(w io.Writer, name string, fs *flag.FlagSet) {
	c := commands[name]
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	if fs == nil {
		return
	}
	var n int
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

func timeNow() time.Time { return time.Now().UTC() }

// profilePath reads a profile path from the environment variable env, with each "%p" replaced
// by the process id, so that a run starting outboxd several times (make bench) keeps every
// profile.
func profilePath(env string) string {
	return strings.ReplaceAll(os.Getenv(env), "%p", strconv.Itoa(os.Getpid()))
}

// startProfile writes a CPU profile to cpuPath until the returned func is called, which also
// writes the allocation profile (every allocation since start, sampled) to memPath and the
// blocking profile (where goroutines waited on channels, locks and selects for 10 µs or more)
// to blockPath; for finding the hot path and the waits under `make bench`
// (OUTBOXD_CPUPROFILE=/tmp/cpu.prof, OUTBOXD_MEMPROFILE=/tmp/mem.prof,
// OUTBOXD_BLOCKPROFILE=/tmp/block.prof). "" skips each.
func startProfile(cpuPath, memPath, blockPath string) func() {
	stopCPU := func() {}
	if cpuPath != "" {
		if f, err := os.Create(cpuPath); err != nil {
			fmt.Fprintln(os.Stderr, "outboxd: OUTBOXD_CPUPROFILE:", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "outboxd: OUTBOXD_CPUPROFILE:", err)
			f.Close()
		} else {
			stopCPU = func() {
				pprof.StopCPUProfile()
				f.Close()
			}
		}
	}
	if blockPath != "" {
		runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
	}
	return func() {
		stopCPU()
		writeProfile("allocs", memPath, "OUTBOXD_MEMPROFILE")
		writeProfile("block", blockPath, "OUTBOXD_BLOCKPROFILE")
	}
}

// writeProfile writes the named runtime profile to path ("" skips it); env names it in errors.
func writeProfile(name, path, env string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd: "+env+":", err)
	}
}

// softMemoryLimitMiB is the soft memory limit outboxd sets without GOMEMLIMIT. The manifests
// and docs quote it (deploy/memory_test.go keeps them in step): 224, so the heap's growth stops
// before the 256 MiB of RSS the docs promise: the limit covers the Go runtime's memory, and a
// fast 1,000,000-row transaction ran the RSS up to 250 MiB with 256.
const softMemoryLimitMiB = 224

// tuneGC trades memory the pipeline's capacity already bounds for less GC CPU: GOGC 200 unless
// the environment sets GOGC, and a soft memory limit of softMemoryLimitMiB unless it sets
// GOMEMLIMIT.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softMemoryLimitMiB << 20)
	}
}

// buildCommit is the commit stamped with -X main.commit, or else the one the go command recorded
// from the checkout it built in (with "-dirty" when the tree had changes), or "" when neither
// is known (a build from a source tarball).
func buildCommit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}
