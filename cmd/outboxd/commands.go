package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/deadletter"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/preflight"
)

// configEnv names the environment variable that is --config's default.
const configEnv = "OUTBOXD_CONFIG"

// configFlags is a command's flag set with the --config every command but version takes.
type configFlags struct {
	cmdFlags
	path *string
}

func newConfigFlags(name string, stdout, stderr io.Writer) configFlags {
	fs := newFlags(name, stdout, stderr)
	return configFlags{cmdFlags: fs, path: fs.String("config", "", "config file (YAML); default $"+configEnv+", which a --config flag overrides")}
}

// explicit reports whether --config was given on the command line.
func (f configFlags) explicit() bool {
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || fl.Name == "config" })
	return given
}

// configPath is --config when given, else $OUTBOXD_CONFIG ("" when neither is set).
func (f configFlags) configPath() string {
	if f.explicit() {
		return *f.path
	}
	return os.Getenv(configEnv)
}

// load parses args and loads the config they name.
func (f configFlags) load(args []string) (*config.Config, error) {
	if err := f.parse(args); err != nil {
		return nil, err
	}
	return readConfig(f.configPath(), config.Load)
}

// loadReadOnly parses args and loads the config they name without its secrets, for commands
// that connect to neither the source nor a sink.
func (f configFlags) loadReadOnly(args []string) (*config.Config, error) {
	if err := f.parse(args); err != nil {
		return nil, err
	}
	return readConfig(f.configPath(), config.LoadWithoutSecrets)
}

var errNoConfig = &exitError{code: 2, err: errors.New("--config is required (or set " + configEnv + ")")}

// readConfig loads the config at path with load (config.Load or config.LoadWithoutSecrets); a
// missing path or a bad config is a usage error (exit 2).
func readConfig(path string, load func(string) (*config.Config, error)) (*config.Config, error) {
	if path == "" {
		return nil, errNoConfig
	}
	cfg, err := load(path)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return cfg, nil
}

// newLogger is the command's logger (see internal/logging for the line format; console lines
// are coloured only on a terminal, see logging.Colour), and becomes
// the logger of the MySQL driver and of package log too, so their lines are JSON in the same
// stream.
func newLogger(c config.Log, w io.Writer) zerolog.Logger {
	if c.Format == "console" {
		w = logging.Console(w, os.Getenv)
	}
	lvl, err := zerolog.ParseLevel(c.Level)
	if err != nil || c.Level == "" {
		lvl = zerolog.InfoLevel
	}
	log := logging.New(w, lvl)
	logging.RouteLibraries(log)
	return log
}

func cmdRun(ctx context.Context, sig *signals, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("run", stdout, stderr)
	from := fs.String("from-gtid", "", "replay from this executed GTID set instead of the checkpoint")
	var dlEvents stringList
	fs.Var(&dlEvents, "dead-letter-event", "dead-letter the row with this event_id in this run if it is poison or its topic does not exist, even under on_poison: stop (repeatable; audited)")
	force := fs.Bool("force", false, "accept a start GTID set that lacks a source the server has")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	if err := deadletter.Check(cfg, dlEvents); err != nil {
		return &exitError{code: 2, err: err}
	}
	log := newLogger(cfg.Log, stderr)
	sig.useLogger(log)
	log.Info().Str("version", version).Msg("outboxd starting")
	err = daemon.Run(ctx, cfg, daemon.Options{FromGTID: *from, Force: *force, DeadLetterEvents: dlEvents, Logger: log, Version: version})
	if err != nil {
		logFailure(log, err, "outboxd stopped with an error")
		return fmt.Errorf("%w: %w", errReported, err)
	}
	return nil
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("check", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the report as one JSON object: ok, problems, warnings, verified")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	r := preflight.Check(ctx, cfg, newLogger(cfg.Log, stderr))
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printCheck(stdout, r)
	}
	if !r.OK {
		return &exitError{code: 1, err: fmt.Errorf("%d problem(s) found", len(r.Problems))}
	}
	return nil
}

// printCheck writes check's report for a person: what passed, then warnings, then problems.
func printCheck(w io.Writer, r preflight.Report) {
	for _, v := range r.Verified {
		fmt.Fprintln(w, "OK   ", v)
	}
	for _, v := range r.Warnings {
		fmt.Fprintln(w, "WARN ", v)
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "FAIL ", p)
	}
	if r.OK {
		fmt.Fprintln(w, "OK    source and sinks are ready for outboxd")
	}
}

func cmdCheckpointShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint show", stdout, stderr)
	cfg, err := fs.loadReadOnly(args)
	if err != nil {
		return err
	}
	var cp *checkpoint.Checkpoint
	if cfg.Checkpoint.MySQL() || cfg.Checkpoint.Kafka() {
		// The row is on the writer, the record on the brokers: this needs source.password or
		// the sink's credentials, so load the secrets after all.
		if cfg, err = readConfig(fs.configPath(), config.Load); err != nil {
			return err
		}
		cp, err = readStore(ctx, cfg)
	} else {
		cp, err = checkpoint.Read(cfg.Checkpoint.Path)
	}
	if err != nil {
		return err
	}
	if cp == nil {
		return &exitError{code: 1, err: fmt.Errorf("no checkpoint at %s yet: outboxd run saves one after the first acknowledged transaction", cfg.Checkpoint.Where())}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(cp)
}

func cmdCheckpointSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint set", stdout, stderr)
	set := fs.String("gtid", "", "the executed GTID set to resume after (this or --from-checkpoint is required)")
	fromCP := fs.Bool("from-checkpoint", false, "keep the checkpoint's position (also a lost one's last known position) and record this config's tables as what it covers")
	force := fs.Bool("force", false, "accept a set that lacks a source the server has")
	ignoreLeader := fs.Bool("ignore-leader", false, "write the row although a leader holds the lock (it is superseded and exits)")
	acceptLayout := fs.Bool("accept-layout", false, "record the outbox tables' current column layouts with the checkpoint (without --gtid: keep its position; a lost checkpoint or one for other tables also needs --from-checkpoint); "+
		"only when no rows were written between the checkpoint and the ALTER TABLE, or after relaying them with the old layout")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	// --accept-layout alone keeps the position, but not a tombstone or other tables: clearing
	// those is what --from-checkpoint asks for.
	layoutOnly := *acceptLayout && *set == "" && !*fromCP
	if layoutOnly {
		*fromCP = true
	}
	if (*set == "") == !*fromCP {
		return &exitError{code: 2, err: errors.New("give exactly one of --gtid SET and --from-checkpoint (or --accept-layout alone, to keep the position)")}
	}
	if *fromCP {
		if *set, err = currentPosition(ctx, cfg); err != nil {
			return err
		}
	}
	var parsed gtid.Set
	if *set != "" {
		if parsed, err = gtid.Parse(cfg.Source.Flavor, *set); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--gtid: %w", err)}
		}
	}
	// The file's lock makes this fail while outboxd runs on the same checkpoint; the mysql
	// store's guard is the leader lock, and the row's epoch stops an outboxd without ha. A
	// position kept as it is needs no check against the source.
	st, old, err := store.OpenToReplace(ctx, cfg, parsed, store.ReplaceOptions{Force: *force || *fromCP, IgnoreLeader: *ignoreLeader})
	if err != nil {
		return refusal(err)
	}
	defer st.Close()
	if layoutOnly {
		if err := checkpoint.CheckScope(cfg.Checkpoint.Where(), old, cfg.ScopeTables()); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("--accept-layout alone records layouts only, and this checkpoint needs more: %w. "+
				"To keep its position anyway, pass --from-checkpoint with --accept-layout", err)}
		}
	}
	cp := checkpoint.Checkpoint{Flavor: cfg.Source.Flavor, GTIDSet: parsed.String(), SavedAt: timeNow()}
	if *fromCP && old != nil && old.GTIDSet == cp.GTIDSet {
		cp = *old // the same position: keep what it recorded (commit time, layouts)
		cp.SavedAt = timeNow()
		cp.Scope = nil // but cover this config's tables (store.Replace), as a live one does
	} else {
		// At a new position the layouts there are unknown: none are written, and the next
		// start records the current ones with a warning.
		cp.Layouts = nil
	}
	if *acceptLayout {
		if cp.Layouts, err = currentLayouts(ctx, cfg); err != nil {
			return err
		}
	}
	if err := store.Replace(ctx, cfg, st, cp, "checkpoint set"); err != nil {
		return err
	}
	prev := "(none)"
	if old != nil {
		prev = old.GTIDSet
	}
	fmt.Fprintf(stdout, "checkpoint %s: %s -> %s\n", cfg.Checkpoint.Where(), prev, cp.GTIDSet)
	return nil
}

// currentPosition is the position the configured checkpoint holds, whatever tables it was
// written for and also when it is a tombstone, for checkpoint set --from-checkpoint.
func currentPosition(ctx context.Context, cfg *config.Config) (string, error) {
	var cp *checkpoint.Checkpoint
	var err error
	if cfg.Checkpoint.MySQL() || cfg.Checkpoint.Kafka() {
		cp, err = readStore(ctx, cfg)
	} else {
		cp, err = checkpoint.Read(cfg.Checkpoint.Path)
	}
	if err != nil {
		return "", err
	}
	if cp == nil {
		return "", &exitError{code: 1, err: fmt.Errorf("--from-checkpoint: no checkpoint at %s: give the position with --gtid", cfg.Checkpoint.Where())}
	}
	if cp.Flavor != cfg.Source.Flavor {
		return "", fmt.Errorf("--from-checkpoint: checkpoint %s is for flavor %s but source.flavor is %s", cfg.Checkpoint.Where(), cp.Flavor, cfg.Source.Flavor)
	}
	return cp.GTIDSet, nil
}

// cmdStatus prints the running daemon's /status, read from admin.listen, for a person (or as
// JSON with --json).
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("status", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the raw /status JSON")
	addrFlag := fs.String("addr", "", "the admin server's `HOST:PORT` (default: admin.listen from the config, else "+config.DefaultAdminListen+")")
	if err := fs.parse(args); err != nil {
		return err
	}
	addr, err := fs.adminAddr(*addrFlag)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := admin.FetchStatus(ctx, addr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return st.Print(stdout)
}

// adminAddr is the admin server status and health ask: addr (--addr) when given, else
// admin.listen of the config (--config or $OUTBOXD_CONFIG), else config.DefaultAdminListen,
// the address outboxd listens on when admin.listen is not set. --addr wins over
// $OUTBOXD_CONFIG, which is a default, but --addr with --config is an error (exit 2), as is a
// config that turns the admin server off.
func (f configFlags) adminAddr(addr string) (string, error) {
	switch {
	case addr != "" && f.explicit():
		return "", &exitError{code: 2, err: errors.New("give either --addr or --config, not both")}
	case addr != "":
		return addr, nil
	}
	path := f.configPath()
	if path == "" {
		return config.DefaultAdminListen, nil
	}
	cfg, err := readConfig(path, config.LoadWithoutSecrets)
	if err != nil {
		return "", err
	}
	if addr = cfg.Admin.Addr(); addr == "" {
		return "", &exitError{code: 2, err: errors.New("admin.listen is off in this config: outboxd serves no status; set admin.listen, such as " + config.DefaultAdminListen)}
	}
	return addr, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
