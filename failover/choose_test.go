package failover

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

var (
	errWait       = errors.New("binlog connection lost")
	errIneligible = errors.New("the source server is not set up for outboxd")
	errPurged     = errors.New("start position needs purged binlogs")
)

// candidate is one fake candidate: how it answers Reach, and its history (MariaDB
// @@gtid_binlog_state or MySQL @@gtid_executed).
type candidate struct {
	reach    Reach
	reachErr error
	history  string
	repl     bool
	purged   bool  // its binlogs no longer reach back to the position
	histErr  error // a question about its history fails
}

// fakeInspector answers from servers, computing Missing as daemon does, and records who was
// asked what.
type fakeInspector struct {
	flavor  gtid.Flavor
	servers map[string]candidate
	asked   []string
}

func (f *fakeInspector) Reach(_ context.Context, addr string) (Reach, error) {
	f.asked = append(f.asked, "reach "+addr)
	s, ok := f.servers[addr]
	if !ok {
		return Away, errors.New("dial tcp " + addr + ": connect: connection refused")
	}
	return s.reach, s.reachErr
}

func (f *fakeInspector) History(_ context.Context, addr string, pos gtid.Set) (Facts, error) {
	f.asked = append(f.asked, "history "+addr)
	s := f.servers[addr]
	if s.histErr != nil {
		return Facts{}, s.histErr
	}
	var m Missing
	if f.flavor == gtid.MySQL {
		exec, err := gtid.Parse(gtid.MySQL, s.history)
		if err != nil {
			return Facts{}, err
		}
		m = MySQLMissing(pos, exec)
	} else {
		var err error
		if m, err = MariaDBMissing(pos, s.history); err != nil {
			return Facts{}, err
		}
	}
	fs := Facts{Missing: m, Replicating: s.repl}
	if s.purged && !m.Lacks() {
		fs.Purged = errPurged
	}
	return fs, nil
}

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "4f22ab58-82db-22f2-af44-d91bb0530673"
)

func TestChoose(t *testing.T) {
	up := func(history string) candidate { return candidate{history: history} }
	replica := func(history string) candidate { return candidate{history: history, repl: true} }
	down := candidate{reach: Away, reachErr: errors.New("i/o timeout")}
	for _, c := range []struct {
		name    string
		flavor  gtid.Flavor // MariaDB when empty
		pos     string      // "" for no position
		goesOn  bool
		addrs   []string
		servers map[string]candidate
		// want is the chosen address, or "" for an error wrapping wantErr (nil: not wrapping
		// any of the sentinels) and containing every wantText.
		want     string
		resume   string // the chosen candidate's Resume.Shared; "" for no Resume
		count    uint64 // Resume.Count
		wantErr  error
		wantText []string
		asked    []string // when set, exactly the questions asked
	}{
		// e2e TestFailoverSwitchover: the old primary is down, the promoted replica has
		// everything and wrote on (0-2-N after 0-1-40).
		{name: "switchover", pos: "0-1-40", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": down, "b": up("0-1-40,0-2-60")}, want: "b"},
		// e2e TestFailoverReadingTheReplica: the only candidate, promoted, has all outboxd read.
		{name: "reading the replica", pos: "0-1-30", addrs: []string{"r"},
			servers: map[string]candidate{"r": up("0-1-30,0-2-50")}, want: "r"},
		// e2e TestFailoverCrashLosesDeliveredTransactions, stop: the promoted replica never got
		// 0-1-21..30 and is a primary now.
		{name: "crash lost delivered, stop", pos: "0-1-30", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": down, "b": up("0-1-20")}, wantErr: ErrMissingGTIDs,
			wantText: []string{"b lacks domain 0: 0-1-21..0-1-30", "on_missing_gtids: continue", "(0-1-20 on b)", "checkpoint set --gtid"}},
		// ... continue (and the mysql store): resume from the newest shared position.
		{name: "crash lost delivered, continue", pos: "0-1-30", goesOn: true, addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": down, "b": up("0-1-20,0-2-25")}, want: "b", resume: "0-1-20", count: 10},
		// e2e TestFailoverSilentOldPrimary: a blackholed candidate times out, the next serves.
		{name: "silent old primary", pos: "0-1-20", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": down, "b": up("0-1-20")}, want: "b"},
		// e2e TestFailoverSkipsAnIneligibleCandidate.
		{name: "skips an ineligible candidate", pos: "0-1-5", addrs: []string{"bad", "p"},
			servers: map[string]candidate{"bad": {reach: Ineligible, reachErr: errIneligible}, "p": up("0-1-9")}, want: "p"},
		// e2e TestFailoverSkipsACandidateThatPurged.
		{name: "skips a candidate that purged", pos: "0-1-10", addrs: []string{"r", "p"},
			servers: map[string]candidate{"r": {history: "0-1-20", repl: true, purged: true}, "p": up("0-1-20")}, want: "p"},
		// e2e TestPurgedStartIsRefused: one server, purged: its refusal as is.
		{name: "only candidate purged", pos: "0-1-3", addrs: []string{"s"},
			servers: map[string]candidate{"s": {history: "0-1-7", purged: true}}, wantErr: errPurged,
			wantText: []string{"source s: start position needs purged binlogs"}},

		{name: "no position: first reachable", addrs: []string{"a", "b", "c"},
			servers: map[string]candidate{"a": down, "b": up("0-1-1"), "c": up("0-1-1")}, want: "b",
			asked: []string{"reach a", "reach b"}},
		{name: "ties: the first in order, later ones not asked", pos: "0-1-5", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": up("0-1-5"), "b": up("0-1-9")}, want: "a",
			asked: []string{"reach a", "history a"}},
		{name: "a later complete candidate beats an earlier lacking one", pos: "0-1-30", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": up("0-1-20,0-2-40"), "b": up("0-1-30")}, want: "b"},
		{name: "all down", pos: "0-1-5", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": down}, wantErr: errWait,
			wantText: []string{"no source candidate is reachable and eligible", "a: i/o timeout", "b: dial tcp b"}},
		{name: "history query fails: away", pos: "0-1-5", addrs: []string{"a"},
			servers: map[string]candidate{"a": {histErr: errors.New("read gtid_binlog_state: bad connection")}}, wantErr: errWait},
		{name: "all ineligible", pos: "0-1-5", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": {reach: Ineligible, reachErr: errIneligible}, "b": {reach: Refused, reachErr: errors.New("Error 1045")}},
			wantErr: errIneligible, wantText: []string{"no source candidate passes the checks", "b refused the login"}},
		{name: "only a refused login: that error", pos: "0-1-5", addrs: []string{"a"},
			servers:  map[string]candidate{"a": {reach: Refused, reachErr: errors.New("Error 1045")}},
			wantText: []string{"source a refused the login: Error 1045"}},
		{name: "ineligible and down: wait", pos: "0-1-5", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": {reach: Ineligible, reachErr: errIneligible}, "b": down}, wantErr: errWait},
		{name: "a replica catching up: wait", pos: "0-1-30", addrs: []string{"a"},
			servers: map[string]candidate{"a": replica("0-1-25")}, wantErr: errWait,
			wantText: []string{"a replica catching up?", "0-1-26..0-1-30"}},
		{name: "behind but a primary: stop", pos: "0-1-30", addrs: []string{"a"},
			servers: map[string]candidate{"a": up("0-1-25")}, wantErr: ErrMissingGTIDs},
		// TRAPS: a promoted replica keeps the domain and writes its own server id. 0-2-130 is
		// past 0-1-105, yet 0-1-101..105 never reached it: replicating or not, it will not get them.
		{name: "promoted replica's own ids, stop", pos: "0-1-105", addrs: []string{"a"},
			servers: map[string]candidate{"a": replica("0-1-100,0-2-130")}, wantErr: ErrMissingGTIDs,
			wantText: []string{"domain 0: 0-1-101..0-1-105", "(0-1-100 on a)"}},
		{name: "promoted replica's own ids, continue", pos: "0-1-105", goesOn: true, addrs: []string{"a"},
			servers: map[string]candidate{"a": replica("0-1-100,0-2-130")}, want: "a", resume: "0-1-100", count: 5},
		{name: "same number from another server", pos: "0-1-105", goesOn: true, addrs: []string{"a"},
			servers: map[string]candidate{"a": up("0-1-104,0-2-105")}, want: "a", resume: "0-1-104", count: 1},
		{name: "continue: the first with a known shared position", pos: "0-1-30", goesOn: true, addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": up("0-2-99"), "b": up("0-1-28")}, want: "b", resume: "0-1-28", count: 2},
		{name: "continue: none shares a known position", pos: "0-1-30", goesOn: true, addrs: []string{"a"},
			servers: map[string]candidate{"a": up("0-2-99")}, wantErr: ErrMissingGTIDs,
			wantText: []string{"none shares a known position", "a lacks domain 0: 0-1-1..0-1-30"}},
		{name: "stop: no shared position to name", pos: "0-1-30", addrs: []string{"a"},
			servers: map[string]candidate{"a": up("0-2-99")}, wantErr: ErrMissingGTIDs,
			wantText: []string{"share and re-delivers"}},
		{name: "one lacking, one down: the decision is the lacking one's", pos: "0-1-30", addrs: []string{"a", "b"},
			servers: map[string]candidate{"a": up("0-1-20"), "b": down}, wantErr: ErrMissingGTIDs},

		{name: "mysql: has it", flavor: gtid.MySQL, pos: uuidA + ":1-40", addrs: []string{"a"},
			servers: map[string]candidate{"a": up(uuidA + ":1-40," + uuidB + ":1-3")}, want: "a"},
		{name: "mysql: a running replica lacking: wait", flavor: gtid.MySQL, pos: uuidA + ":1-40", addrs: []string{"a"},
			servers: map[string]candidate{"a": replica(uuidA + ":1-35")}, wantErr: errWait},
		{name: "mysql: a primary lacking, stop", flavor: gtid.MySQL, pos: uuidA + ":1-40", addrs: []string{"a"},
			servers: map[string]candidate{"a": up(uuidA + ":1-35," + uuidB + ":1-9")}, wantErr: ErrMissingGTIDs,
			wantText: []string{uuidA + ":36-40 (not in @@gtid_executed)"}},
		{name: "mysql: a primary lacking, continue", flavor: gtid.MySQL, pos: uuidA + ":1-40," + uuidB + ":1-2", goesOn: true, addrs: []string{"a"},
			servers: map[string]candidate{"a": up(uuidA + ":1-35," + uuidB + ":1-9")}, want: "a", resume: uuidA + ":1-35," + uuidB + ":1-2", count: 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			flavor := c.flavor
			if flavor == "" {
				flavor = gtid.MariaDB
			}
			var pos gtid.Set
			if c.pos != "" {
				var err error
				if pos, err = gtid.Parse(flavor, c.pos); err != nil {
					t.Fatal(err)
				}
			}
			in := &fakeInspector{flavor: flavor, servers: c.servers}
			rules := Rules{Addrs: c.addrs, Flavor: flavor, GoesOn: c.goesOn, Wait: errWait, Ineligible: errIneligible}
			ch, err := Choose(context.Background(), rules, in, pos, c.pos != "")
			if c.asked != nil && !slices.Equal(in.asked, c.asked) {
				t.Errorf("asked %q, want %q", in.asked, c.asked)
			}
			if c.want != "" {
				if err != nil || ch.Addr != c.want {
					t.Fatalf("chose %q, %v; want %q", ch.Addr, err, c.want)
				}
				switch {
				case c.resume == "" && ch.Resume != nil:
					t.Fatalf("resume %+v, want none", *ch.Resume)
				case c.resume != "":
					want, _ := gtid.Parse(flavor, c.resume)
					if ch.Resume == nil || !ch.Resume.Shared.Equal(want) || ch.Resume.Count != c.count {
						t.Fatalf("resume %+v, want %s (%d missing)", ch.Resume, want, c.count)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("chose %q, want an error", ch.Addr)
			}
			for _, s := range []error{errWait, errIneligible, ErrMissingGTIDs, errPurged} {
				if errors.Is(err, s) != (s == c.wantErr) {
					t.Errorf("errors.Is(err, %q) = %v; err: %v", s, !(s == c.wantErr), err)
				}
			}
			for _, w := range c.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestChooseStopsWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := &fakeInspector{flavor: gtid.MariaDB, servers: map[string]candidate{"a": {reach: Away, reachErr: context.Canceled}}}
	_, err := Choose(ctx, Rules{Addrs: []string{"a", "b"}, Flavor: gtid.MariaDB, Wait: errWait, Ineligible: errIneligible}, in, gtid.Empty(gtid.MariaDB), true)
	if !errors.Is(err, context.Canceled) || errors.Is(err, errWait) || len(in.asked) != 1 {
		t.Fatalf("err %v after asking %q; want ctx's error after the first", err, in.asked)
	}
}
