package failover

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
)

// fakeSource is one candidate server as Sources sees it through dial, Check and history.
type fakeSource struct {
	dialErr  error  // opening its pool fails
	checkErr error  // the start-up checks' verdict
	history  string // MariaDB @@gtid_binlog_state or MySQL @@gtid_executed
	purged   string // what its binlogs no longer hold (server.Purged)
	repl     bool   // a running replica
	queryErr error  // every question about its history fails
}

// rig answers Sources' I/O from fakes and records what was asked of whom.
type rig struct {
	flavor  gtid.Flavor
	fakes   map[string]fakeSource
	addrOf  map[*sql.DB]string
	checked []string // addresses the start-up checks ran on
	asked   []string // "addr method" of history questions
}

// noServer is a connector with nothing behind it: the pools Sources hands out in these tests
// are never queried directly, every question goes through the rig.
type noServer struct{}

func (noServer) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("unit test: no server behind this pool")
}
func (noServer) Driver() driver.Driver { return nil }

// history of one fake candidate.
type fakeHistory struct {
	r    *rig
	addr string
}

func (h fakeHistory) fake(method string) (fakeSource, error) {
	h.r.asked = append(h.r.asked, h.addr+" "+method)
	f := h.r.fakes[h.addr]
	return f, f.queryErr
}

func (h fakeHistory) Position(_ context.Context, fl gtid.Flavor) (gtid.Set, error) {
	f, err := h.fake("Position")
	if err != nil {
		return gtid.Set{}, err
	}
	return gtid.Parse(fl, f.history)
}

func (h fakeHistory) Purged(_ context.Context, fl gtid.Flavor) (gtid.Set, error) {
	f, err := h.fake("Purged")
	if err != nil {
		return gtid.Set{}, err
	}
	return gtid.Parse(fl, f.purged)
}

func (h fakeHistory) BinlogState(context.Context) (string, bool, error) {
	f, err := h.fake("BinlogState")
	return f.history, false, err
}

func (h fakeHistory) Replicating(context.Context, gtid.Flavor) (bool, error) {
	f, err := h.fake("Replicating")
	return f.repl, err
}

// options of a test's config.
type setup struct {
	flavor    gtid.Flavor // MariaDB when empty
	addrs     []string
	onMissing string // on_missing_gtids; stop when empty
	store     string // checkpoint.store; the file store when empty
}

// newRigged returns Sources over cfg whose I/O the rig answers from fakes, its log and its
// metrics.
func newRigged(t *testing.T, s setup, fakes map[string]fakeSource) (*Sources, *rig, *bytes.Buffer, *metrics.Metrics) {
	t.Helper()
	if s.flavor == "" {
		s.flavor = gtid.MariaDB
	}
	if s.onMissing == "" {
		s.onMissing = config.OnMissingStop
	}
	cfg := &config.Config{}
	cfg.Source.Flavor = s.flavor
	cfg.Source.Addrs = s.addrs
	cfg.Source.Addr = s.addrs[0]
	cfg.Source.OnMissingGTIDs = s.onMissing
	cfg.Checkpoint.Store = s.store
	r := &rig{flavor: s.flavor, fakes: fakes, addrOf: map[*sql.DB]string{}}
	var logs bytes.Buffer
	m := metrics.New(metrics.Options{})
	src := NewSources(SourcesConfig{
		Config: cfg, Log: zerolog.New(&logs), Metrics: m,
		Check: func(_ context.Context, db *sql.DB, at *config.Config) error {
			addr := r.addrOf[db]
			if addr != at.Source.Addr {
				t.Errorf("checks of %s ran with the config at %s", addr, at.Source.Addr)
			}
			r.checked = append(r.checked, addr)
			return r.fakes[addr].checkErr
		},
		Ineligible: errIneligible,
		NewReader: func(context.Context, *config.Config, *sql.DB) (*binlog.Reader, error) {
			return nil, errors.New("unit test: no reader")
		},
	})
	src.dial = func(_ context.Context, at *config.Config) (*sql.DB, error) {
		f, ok := r.fakes[at.Source.Addr]
		if !ok {
			return nil, fmt.Errorf("dial tcp %s: connect: connection refused", at.Source.Addr)
		}
		if f.dialErr != nil {
			return nil, f.dialErr
		}
		db := sql.OpenDB(noServer{})
		r.addrOf[db] = at.Source.Addr
		return db, nil
	}
	src.history = func(db *sql.DB) history { return fakeHistory{r: r, addr: r.addrOf[db]} }
	t.Cleanup(src.Close)
	return src, r, &logs, m
}

// missingCounted is outboxd_missing_transactions_total.
func missingCounted(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "outboxd_missing_transactions_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("outboxd_missing_transactions_total is not registered")
	return 0
}

func TestPick(t *testing.T) {
	refused := &mysqldriver.MySQLError{Number: 1045, Message: "Access denied for user 'outboxd'"}
	checksFail := fmt.Errorf("%w: binlog_format is STATEMENT", errIneligible)
	away := errors.New("i/o timeout")
	ab := []string{"a", "b"}
	cases := []struct {
		name     string
		setup    setup
		verified string
		pos      string // "" with noPos
		noPos    bool
		fakes    map[string]fakeSource
		want     string // the picked candidate
		resume   string // Picked.Resume.Shared, "" for none
		count    uint64 // Picked.Resume.Count
		wantErr  error
		errHas   []string
		checked  []string // the candidates the start-up checks ran on
		asked    []string // the history questions, in order (nil: not compared)
		logHas   string
	}{
		{name: "the first has every transaction", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-30"}, "b": {history: "0-1-30"}}, want: "a",
			checked: []string{"a"}, asked: []string{"a BinlogState", "a Purged"}},
		// e2e TestFailoverToReplica: the primary gone, the replica has everything.
		{name: "an unreachable first: the next (the switch is logged)", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {dialErr: away}, "b": {history: "0-1-30"}}, want: "b",
			checked: []string{"b"}},
		{name: "none reachable: wait", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {dialErr: away}}, wantErr: binlog.ErrDisconnected,
			errHas: []string{"a: i/o timeout", "b: dial tcp b: connect: connection refused"}},
		{name: "a verified candidate is not checked again", setup: setup{addrs: ab}, verified: "a", pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-30", checkErr: checksFail}, "b": {history: "0-1-30"}}, want: "a",
			checked: nil},
		{name: "the verified mark is for its own candidate only", setup: setup{addrs: ab}, verified: "b", pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-30", checkErr: checksFail}, "b": {history: "0-1-30", checkErr: checksFail}}, want: "b",
			checked: []string{"a"}},
		{name: "one fails the checks: the next", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-30", checkErr: checksFail}, "b": {history: "0-1-30"}}, want: "b",
			checked: []string{"a", "b"}},
		{name: "every one fails the checks: ineligible, not a wait", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {checkErr: checksFail}, "b": {checkErr: checksFail}},
			wantErr: errIneligible, errHas: []string{"no source candidate passes the checks", "a: ", "b: "}},
		{name: "checks that could not ask: away", setup: setup{addrs: []string{"a"}}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {checkErr: errors.New("SHOW GRANTS: bad connection")}},
			wantErr: binlog.ErrDisconnected, errHas: []string{"SHOW GRANTS: bad connection"}},
		{name: "a refused login alone: its error", setup: setup{addrs: []string{"a"}}, pos: "0-1-30",
			fakes:  map[string]fakeSource{"a": {dialErr: refused}},
			errHas: []string{"source a refused the login", "1045"}},
		{name: "no position: the first reachable, no history asked", setup: setup{addrs: ab}, noPos: true,
			fakes: map[string]fakeSource{"a": {dialErr: away}, "b": {history: "0-1-1"}}, want: "b",
			checked: []string{"b"}, asked: []string{}},
		{name: "a history question fails: away, the next", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {queryErr: errors.New("bad connection")}, "b": {history: "0-1-30"}}, want: "b"},
		// e2e TestPurgedStartIsRefused's multi-candidate variant: a replica that purged sooner.
		{name: "the first purged the binlogs after the position: the next, logged", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-40", purged: "0-1-35"}, "b": {history: "0-1-40", purged: "0-1-10"}}, want: "b",
			logHas: "its binlogs no longer reach back to the checkpoint"},
		{name: "a lacking first, a second with everything: the second, no resume", setup: setup{addrs: ab, onMissing: config.OnMissingContinue}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-20"}, "b": {history: "0-1-30"}}, want: "b"},
		// e2e TestMissingGTIDsStops: a crash failover lost delivered transactions.
		{name: "every candidate lacks, stop: ErrMissingGTIDs naming each", setup: setup{addrs: ab}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {history: "0-1-20"}, "b": {history: "0-1-25"}},
			wantErr: ErrMissingGTIDs, errHas: []string{"a lacks domain 0: 0-1-21..0-1-30", "b lacks domain 0: 0-1-26..0-1-30", "(0-1-20 on a)"},
			asked: []string{"a BinlogState", "a Replicating", "b BinlogState", "b Replicating"}},
		// e2e TestMissingGTIDsContinue.
		{name: "continue: resume from the shared position", setup: setup{addrs: ab, onMissing: config.OnMissingContinue}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {dialErr: away}, "b": {history: "0-1-20"}}, want: "b", resume: "0-1-20", count: 10},
		// e2e TestMySQLStoreFailoverResumes: the store's row replicated with the data.
		{name: "the mysql store goes on under stop", setup: setup{addrs: []string{"a"}, store: config.CheckpointStoreMySQL}, pos: "0-1-30",
			fakes: map[string]fakeSource{"a": {history: "0-1-20"}}, want: "a", resume: "0-1-20", count: 10},
		{name: "continue, but no shared position known: stop with the fix", setup: setup{addrs: []string{"a"}, onMissing: config.OnMissingContinue}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {history: "0-2-5"}},
			wantErr: ErrMissingGTIDs, errHas: []string{"none shares a known position", "checkpoint set --gtid"}},
		{name: "a lacking replica still catching up: wait", setup: setup{addrs: []string{"a"}, onMissing: config.OnMissingContinue}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {history: "0-1-20", repl: true}},
			wantErr: binlog.ErrDisconnected, errHas: []string{"a replica catching up?"}},
		{name: "a lacking replica whose domain moved on never catches up: ErrMissingGTIDs", setup: setup{addrs: []string{"a"}}, pos: "0-1-30",
			fakes:   map[string]fakeSource{"a": {history: "0-1-20,0-2-40", repl: true}},
			wantErr: ErrMissingGTIDs},
		{name: "mysql: a primary lacking, stop", setup: setup{flavor: gtid.MySQL, addrs: []string{"a"}}, pos: uuidA + ":1-40",
			fakes:   map[string]fakeSource{"a": {history: uuidA + ":1-30"}},
			wantErr: ErrMissingGTIDs, errHas: []string{uuidA + ":31-40 (not in @@gtid_executed)"},
			asked: []string{"a Position", "a Replicating"}},
		{name: "mysql: a primary lacking, continue", setup: setup{flavor: gtid.MySQL, addrs: []string{"a"}, onMissing: config.OnMissingContinue}, pos: uuidA + ":1-40",
			fakes: map[string]fakeSource{"a": {history: uuidA + ":1-30"}}, want: "a", resume: uuidA + ":1-30", count: 10},
		{name: "mysql: any lacking replica may catch up: wait", setup: setup{flavor: gtid.MySQL, addrs: []string{"a"}}, pos: uuidA + ":1-40",
			fakes:   map[string]fakeSource{"a": {history: uuidA + ":1-30", repl: true}},
			wantErr: binlog.ErrDisconnected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, r, logs, _ := newRigged(t, c.setup, c.fakes)
			flavor := r.flavor
			var pos gtid.Set
			if !c.noPos {
				var err error
				if pos, err = gtid.Parse(flavor, c.pos); err != nil {
					t.Fatal(err)
				}
			}
			got, err := src.Pick(context.Background(), pos, !c.noPos, c.verified)
			for _, s := range c.errHas {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("error %v: want it to name %q", err, s)
				}
			}
			if c.wantErr != nil || len(c.errHas) > 0 {
				if err == nil {
					t.Fatalf("picked %s, want an error", got.Addr)
				}
				if c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Errorf("error %v: want it to wrap %v", err, c.wantErr)
				}
				for _, other := range []error{binlog.ErrDisconnected, errIneligible, ErrMissingGTIDs} {
					if other != c.wantErr && errors.Is(err, other) {
						t.Errorf("error %v wraps %v too", err, other)
					}
				}
				if cur, _ := src.Current(); cur != c.setup.addrs[0] {
					t.Errorf("a failed pick moved the current candidate to %s", cur)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Addr != c.want {
				t.Errorf("picked %s, want %s", got.Addr, c.want)
			}
			if got.DB == nil || r.addrOf[got.DB] != c.want {
				t.Errorf("picked pool is %s's, want %s's", r.addrOf[got.DB], c.want)
			}
			if cur, db := src.Current(); cur != c.want || db != got.DB {
				t.Errorf("current is %s, want the pick %s with its pool", cur, c.want)
			}
			switch {
			case c.resume == "" && got.Resume != nil:
				t.Errorf("resume from %s, want the position asked for", got.Resume.Shared)
			case c.resume != "" && got.Resume == nil:
				t.Errorf("no resume, want %s", c.resume)
			case c.resume != "":
				want, _ := gtid.Parse(flavor, c.resume)
				if !got.Resume.Shared.Equal(want) || got.Resume.Count != c.count {
					t.Errorf("resume from %s (%d missing), want %s (%d)", got.Resume.Shared, got.Resume.Count, c.resume, c.count)
				}
			}
			if c.checked != nil || c.verified != "" {
				if !slices.Equal(r.checked, c.checked) {
					t.Errorf("checks ran on %v, want %v", r.checked, c.checked)
				}
			}
			// A switch away from the current candidate (source.addr at first) is logged once.
			const switched = "streaming from another source candidate"
			wantLines := 0
			if c.want != c.setup.addrs[0] {
				wantLines++
				if !strings.Contains(logs.String(), `"previous":"`+c.setup.addrs[0]+`","message":"`+switched) {
					t.Errorf("log %q: want %q from %s", logs.String(), switched, c.setup.addrs[0])
				}
			} else if strings.Contains(logs.String(), switched) {
				t.Errorf("log %q: no switch happened", logs.String())
			}
			if c.logHas != "" {
				wantLines++
				if !strings.Contains(logs.String(), c.logHas) {
					t.Errorf("log %q: want %q", logs.String(), c.logHas)
				}
			}
			if n := strings.Count(logs.String(), "\n"); n != wantLines {
				t.Errorf("%d log lines, want %d:\n%s", n, wantLines, logs.String())
			}
			if c.asked != nil && !slices.Equal(r.asked, c.asked) && !(len(c.asked) == 0 && len(r.asked) == 0) {
				t.Errorf("asked %v, want %v", r.asked, c.asked)
			}
		})
	}
}

func TestLostBehind(t *testing.T) {
	cases := []struct {
		name   string
		flavor gtid.Flavor // MariaDB when empty
		// prev is the checkpoint this process saved in an earlier term, picked the position
		// Pick was given (the store's), and fake the picked candidate.
		prevFlavor   gtid.Flavor // flavor when empty
		prev, picked string
		fake         fakeSource
		lines        []string // the missing lines logged
		count        float64
	}{
		// e2e TestMySQLStoreCrashFailoverReportsLost: the store's row is older than what this
		// process delivered, and the promoted primary lacks the difference.
		{name: "a primary lacks what this process delivered", prev: "0-1-30", picked: "0-1-20",
			fake: fakeSource{history: "0-1-20"}, lines: []string{"domain 0: 0-1-21..0-1-30"}, count: 10},
		{name: "one line per lacking domain", prev: "0-1-30,1-1-8", picked: "0-1-20,1-1-5",
			fake:  fakeSource{history: "0-1-20,1-1-5"},
			lines: []string{"domain 0: 0-1-21..0-1-30", "domain 1: 1-1-6..1-1-8"}, count: 13},
		{name: "a replica whose domain moved on lacks them for good", prev: "0-1-30", picked: "0-1-20",
			fake: fakeSource{history: "0-1-20,0-2-50", repl: true}, lines: []string{"domain 0: 0-1-21..0-1-30"}, count: 10},
		{name: "a replica still catching up: nothing", prev: "0-1-30", picked: "0-1-20",
			fake: fakeSource{history: "0-1-20", repl: true}},
		{name: "the candidate has them: nothing", prev: "0-1-30", picked: "0-1-20",
			fake: fakeSource{history: "0-1-35"}},
		{name: "prev is the position picked: Pick reported it already", prev: "0-1-30", picked: "0-1-30",
			fake: fakeSource{history: "0-1-20"}},
		{name: "no earlier position", prev: "", picked: "0-1-20",
			fake: fakeSource{history: "0-1-10"}},
		{name: "an earlier checkpoint of MariaDB on a MySQL source: nothing", flavor: gtid.MySQL, prevFlavor: gtid.MariaDB, prev: "0-1-30", picked: uuidA + ":1-30",
			fake: fakeSource{history: uuidA + ":1-30"}},
		{name: "a question fails: nothing", prev: "0-1-30", picked: "0-1-20",
			fake: fakeSource{queryErr: errors.New("bad connection")}},
		{name: "mysql: a primary lacks them", flavor: gtid.MySQL, prev: uuidA + ":1-40", picked: uuidA + ":1-30",
			fake: fakeSource{history: uuidA + ":1-30"}, lines: []string{uuidA + ":31-40 (not in @@gtid_executed)"}, count: 10},
		{name: "mysql: a replica may catch up: nothing", flavor: gtid.MySQL, prev: uuidA + ":1-40", picked: uuidA + ":1-30",
			fake: fakeSource{history: uuidA + ":1-30", repl: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flavor := c.flavor
			if flavor == "" {
				flavor = gtid.MariaDB
			}
			prevFlavor := c.prevFlavor
			if prevFlavor == "" {
				prevFlavor = flavor
			}
			src, _, logs, m := newRigged(t, setup{flavor: flavor, addrs: []string{"p"}, store: config.CheckpointStoreMySQL},
				map[string]fakeSource{"p": c.fake})
			db, err := src.open(context.Background(), "p")
			if err != nil {
				t.Fatal(err)
			}
			picked, err := gtid.Parse(flavor, c.picked)
			if err != nil {
				t.Fatal(err)
			}
			prev := checkpoint.Checkpoint{Flavor: prevFlavor, GTIDSet: c.prev}
			src.LostBehind(context.Background(), prev, picked, Picked{Addr: "p", DB: db})
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if l == "" {
					continue
				}
				if !strings.Contains(l, lostBehindMsg) || !strings.Contains(l, `"source":"p"`) || !strings.Contains(l, `"level":"error"`) {
					t.Errorf("log line %s: want an error naming the source with %q", l, lostBehindMsg)
				}
				i := strings.Index(l, `"missing":"`)
				if i < 0 {
					t.Fatalf("log line %s has no missing field", l)
				}
				rest := l[i+len(`"missing":"`):]
				got = append(got, rest[:strings.Index(rest, `"`)])
			}
			if len(got) != len(c.lines) {
				t.Errorf("reported %q, want lines starting %q", got, c.lines)
			}
			for i := range min(len(got), len(c.lines)) {
				if !strings.HasPrefix(got[i], c.lines[i]+" (the server's last") && !(flavor == gtid.MySQL && got[i] == c.lines[i]) {
					t.Errorf("reported %q, want %q", got[i], c.lines[i])
				}
			}
			if n := missingCounted(t, m); n != c.count {
				t.Errorf("counted %v missing transactions, want %v", n, c.count)
			}
		})
	}
}

// TestGaveUp: the report of a resume names why outboxd went on, and counts what was lost.
func TestGaveUp(t *testing.T) {
	for _, c := range []struct {
		s      setup
		prefix string
	}{
		{setup{addrs: []string{"a"}, onMissing: config.OnMissingContinue}, "on_missing_gtids: continue: "},
		{setup{addrs: []string{"a"}, store: config.CheckpointStoreMySQL}, "checkpoint.store: mysql: "},
	} {
		src, _, logs, m := newRigged(t, c.s, nil)
		pos, _ := gtid.Parse(gtid.MariaDB, "0-1-30,1-1-8")
		shared, _ := gtid.Parse(gtid.MariaDB, "0-1-20,1-1-5")
		src.GaveUp(pos, Picked{Addr: "a", Resume: &Missing{Lines: []string{"domain 0: x", "domain 1: y"}, Count: 13, Shared: shared, SharedOK: true}})
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("%d log lines, want one per lacking domain:\n%s", len(lines), logs.String())
		}
		for _, l := range lines {
			if !strings.Contains(l, `"message":"`+c.prefix) || !strings.Contains(l, `"resume_from":"0-1-20,1-1-5"`) {
				t.Errorf("log line %s: want the message to start with %q and name resume_from", l, c.prefix)
			}
		}
		if n := missingCounted(t, m); n != 13 {
			t.Errorf("counted %v, want 13", n)
		}
	}
}
