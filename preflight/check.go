package preflight

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinks"
)

// Names of the checks Check runs besides the source's settings (those are CheckNames).
const (
	// CheckSource: outboxd can connect to the source and inspect it.
	CheckSource = "source"
	// CheckSink: a sink opened and its brokers (or NameServers) answered.
	CheckSink = "sink"
	// CheckTopic: a destination topic without placeholders (or the dead-letter topic) is there.
	CheckTopic = "topic"
)

// checkTimeout bounds each part of Check: the source, then all sinks at once.
const checkTimeout = 30 * time.Second

// Item is one finding of Check, or one thing it verified. Its JSON is part of the stable
// output of `outboxd check --json` (see docs/reference/cli-guide.md): add fields, never rename them.
type Item struct {
	// Check is the stable name of the check: one of CheckNames (what source.skip_checks
	// takes), CheckSource, CheckSink, CheckTopic, CheckReconcile or CheckBackfill.
	Check string `json:"check"`
	// Subject is what was checked: "binlog_format", "REPLICATION SLAVE", "table shop.outbox",
	// "column shop.outbox.payload", "source 127.0.0.1:3306", "sinks.main", "sinks.main topic orders".
	Subject string `json:"subject"`
	// Message says what was found; for a verified item, what holds.
	Message string `json:"message"`
	// Fix says what to change; empty for a verified item.
	Fix string `json:"fix,omitempty"`
	// Skipped marks a finding of a check named in source.skip_checks: a warning, not a problem.
	Skipped bool `json:"skipped,omitempty"`

	line string // the line check prints without --json
}

// String is the line `outboxd check` prints for the item (after OK, WARN or FAIL).
func (i Item) String() string { return i.line }

// Report is what Check found. OK is true when Problems is empty; the slices are never nil,
// so that their JSON is [] and not null.
type Report struct {
	OK       bool   `json:"ok"`
	Problems []Item `json:"problems"`
	Warnings []Item `json:"warnings"`
	Verified []Item `json:"verified"`
}

// Check verifies the source server (its settings, the account's privileges, every outbox table
// and its columns) and every sink with its static topics, and reports each problem with what to
// change, each warning, and each check that passed. Every sink is opened and checked on its
// own, so one that fails to open or to answer does not hide the others. It blocks until every
// check answered or timed out (30 s for the source, then 30 s for all sinks at once) or ctx
// ends; a check that could not run at all (no connection) is a problem of its own.
func Check(ctx context.Context, cfg *config.Config, log zerolog.Logger) Report {
	var r Report
	checkSource(ctx, cfg, &r)
	checkStore(ctx, cfg, &r)
	checkCleanup(ctx, cfg, &r)
	checkSinks(ctx, cfg, log, &r)
	if it, ok := reconcileItem(cfg); ok {
		r.Verified = append(r.Verified, it)
	}
	if it, ok := backfillItem(cfg); ok {
		r.Verified = append(r.Verified, it)
	}
	r.OK = len(r.Problems) == 0
	for _, s := range []*[]Item{&r.Problems, &r.Warnings, &r.Verified} {
		if *s == nil {
			*s = []Item{}
		}
	}
	return r
}

// checkSource checks every candidate of source.addrs, each as the only source: outboxd may
// have to stream from any of them after a failover.
func checkSource(ctx context.Context, cfg *config.Config, r *Report) {
	for _, addr := range cfg.Source.Addrs {
		checkSourceAt(ctx, cfg.SourceAt(addr), r)
	}
	if len(cfg.Source.Addrs) == 0 { // a Config built in code without ApplyDefaults
		checkSourceAt(ctx, cfg, r)
	}
}

// unreachable returns how a check whose server could not be reached or read records that: a
// problem of check on subject, "what: err", with fix.
func (r *Report) unreachable(check, subject, fix string) func(what string, err error) {
	return func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		r.Problems = append(r.Problems, Item{Check: check, Subject: subject, Message: msg, Fix: fix, line: fmt.Sprintf("%s: %s", subject, msg)})
	}
}

func checkSourceAt(ctx context.Context, cfg *config.Config, r *Report) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	addr := cfg.Source.Addr
	subject := "source " + addr
	fail := r.unreachable(CheckSource, subject, "check source.addr, source.user and source.password, and that the server is up and reachable from here")
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		fail("cannot connect", err)
		return
	}
	defer db.Close()
	rep, err := inspectSource(ctx, db, cfg)
	if err != nil {
		fail("cannot inspect", err)
		return
	}
	r.Verified = append(r.Verified, Item{
		Check: CheckSource, Subject: subject, Message: "connected as " + cfg.Source.User,
		line: fmt.Sprintf("%s: connected as %s", subject, cfg.Source.User),
	})
	r.addFindings(addr, rep.found)
	verified := verifiedSource(inspectRequest(rep.cfg), rep.found)
	if v, ok := verifiedRetention(ctx, db, cfg, rep.found); ok {
		verified = append(verified, v)
	}
	for _, v := range verified {
		v.line = fmt.Sprintf("%s: %s %s [check %s]", subject, v.Subject, v.Message, v.Check)
		r.Verified = append(r.Verified, v)
	}
}

// addFindings adds the findings of an inspection of the server at addr: warnings and skipped
// ones as warnings, the rest as problems.
func (r *Report) addFindings(addr string, found []Problem) {
	for _, p := range found {
		it := Item{Check: p.Check, Subject: p.Setting, Message: p.Found, Fix: p.Fix, Skipped: p.Skipped, line: sourceLine(addr, p)}
		if p.Warning || p.Skipped {
			r.Warnings = append(r.Warnings, it)
		} else {
			r.Problems = append(r.Problems, it)
		}
	}
}

// verifiedSource lists the source checks of req that ran and found nothing (neither a problem,
// a warning nor a skipped finding), in the order Inspect runs them. A table's three checks
// count as not run when the table is missing or unreadable; none but the flavor check runs
// when the server is of the other flavor (unless that check is skipped). Pure.
func verifiedSource(req Request, found []Problem) []Item {
	flagged := func(check, table string) bool {
		return slices.ContainsFunc(found, func(p Problem) bool { return p.Check == check && p.Table == table })
	}
	if slices.ContainsFunc(found, func(p Problem) bool { return p.Check == CheckFlavor && !p.Skipped }) {
		return nil
	}
	type want struct{ check, subject, message string }
	global := []want{
		{CheckFlavor, "source.flavor", "is " + string(req.Flavor) + ", as the server"},
		{CheckLogBin, "log_bin", "is ON"},
		{CheckBinlogFormat, "binlog_format", "is ROW"},
		{CheckBinlogRowImage, "binlog_row_image", "is FULL"},
		{CheckBinlogRowMetadata, "binlog_row_metadata", "is FULL"},
		{CheckServerID, "server_id", "is set (non-zero)"},
	}
	if req.Flavor == gtid.MySQL {
		global = append(global,
			want{CheckGTIDMode, "gtid_mode", "is ON"},
			want{CheckEnforceGTID, "enforce_gtid_consistency", "is ON"})
	} else {
		global = append(global, want{CheckGTIDStrictMode, "gtid_strict_mode", "is ON"})
	}
	global = append(global,
		want{CheckReplicationSlave, "REPLICATION SLAVE", "is granted"},
		want{CheckReplicationClient, "REPLICATION CLIENT", "is granted"})
	var out []Item
	for _, g := range global {
		if !flagged(g.check, "") {
			out = append(out, Item{Check: g.check, Subject: g.subject, Message: g.message})
		}
	}
	for _, t := range req.Tables {
		if flagged(CheckTableExists, t.Name) || flagged(CheckTableSelect, t.Name) {
			continue
		}
		subject := "table " + t.Name
		out = append(out,
			Item{Check: CheckTableExists, Subject: subject, Message: "exists"},
			Item{Check: CheckTableSelect, Subject: subject, Message: "is readable by the account"})
		if len(t.Columns) > 0 && !flagged(CheckTableColumns, t.Name) {
			names := make([]string, len(t.Columns))
			for i, c := range t.Columns {
				names[i] = c.Name
			}
			out = append(out, Item{Check: CheckTableColumns, Subject: subject, Message: "has the configured columns " + strings.Join(names, ", ")})
		}
	}
	return out
}

// checkSinks opens every sink on its own and checks the opened ones at once: first that the
// brokers answer, then each static topic, so that each failure is reported under its own name.
// The RocketMQ client's own log lines are dropped: each problem it would log is a line of the
// report, which they would otherwise interleave.
func checkSinks(ctx context.Context, cfg *config.Config, log zerolog.Logger, r *Report) {
	opened, failed := sinks.OpenEach(cfg, log, zerolog.Nop())
	defer func() {
		for _, s := range opened {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	names := slices.Sorted(maps.Keys(cfg.Sinks))
	results := make([][]checkResult, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		if err := failed[name]; err != nil {
			results[i] = []checkResult{{item: Item{Check: CheckSink, Subject: "sinks." + name, Message: "cannot open: " + strings.TrimPrefix(err.Error(), "sinks."+name+": "),
				Fix: "fix sinks." + name + " in the config", line: err.Error()}}}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = checkSink(ctx, name, opened[name], sinks.StaticTopics(cfg, name))
		}()
	}
	wg.Wait()
	for _, rs := range results {
		for _, res := range rs {
			if res.ok {
				r.Verified = append(r.Verified, res.item)
			} else {
				r.Problems = append(r.Problems, res.item)
			}
		}
	}
}

type checkResult struct {
	item Item
	ok   bool
}

// checkSink checks one opened sink: that its brokers answer and then, when they do, each topic
// on its own. It blocks until the brokers answered or ctx ended.
func checkSink(ctx context.Context, name string, s sink.Sink, topics []string) []checkResult {
	subject := "sinks." + name
	c, ok := s.(sink.Checker)
	if !ok {
		return []checkResult{{ok: true, item: Item{Check: CheckSink, Subject: subject, Message: "opened (this sink type has no check)",
			line: subject + ": opened (this sink type has no check)"}}}
	}
	if err := c.Check(ctx, nil); err != nil {
		fix := "check sinks." + name + " (addresses, TLS, credentials) and that its brokers are up and reachable from here"
		if fe := (*sink.FixError)(nil); errors.As(err, &fe) {
			fix = fe.Fix
		}
		return []checkResult{{item: Item{Check: CheckSink, Subject: subject, Message: err.Error(), Fix: fix,
			line: fmt.Sprintf("sink %s: %v", name, err)}}}
	}
	out := []checkResult{{ok: true, item: Item{Check: CheckSink, Subject: subject, Message: "opened; the brokers answered",
		line: subject + ": opened; the brokers answered"}}}
	for _, t := range topics {
		ts := subject + " topic " + t
		if err := c.Check(ctx, []string{t}); err != nil {
			out = append(out, checkResult{item: Item{Check: CheckTopic, Subject: ts, Message: err.Error(),
				Fix:  "create topic " + t + " on sinks." + name + ", or route to a topic that exists",
				line: fmt.Sprintf("sink %s: %v", name, err)}})
			continue
		}
		out = append(out, checkResult{ok: true, item: Item{Check: CheckTopic, Subject: ts, Message: "is there",
			line: ts + ": is there"}})
	}
	return out
}
