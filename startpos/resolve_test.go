package startpos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
)

// fakeServer answers as a server at pos (its executed set) whose oldest binlog starts after
// purged; state and strict are MariaDB's gtid_binlog_state and gtid_strict_mode. A failing
// query returns its entry of fail.
type fakeServer struct {
	pos, purged, state string
	strict             bool
	fail               map[string]error // by method name
}

func (f fakeServer) Position(_ context.Context, fl gtid.Flavor) (gtid.Set, error) {
	if err := f.fail["Position"]; err != nil {
		return gtid.Set{}, err
	}
	return gtid.Parse(fl, f.pos)
}

func (f fakeServer) Purged(_ context.Context, fl gtid.Flavor) (gtid.Set, error) {
	if err := f.fail["Purged"]; err != nil {
		return gtid.Set{}, err
	}
	return gtid.Parse(fl, f.purged)
}

func (f fakeServer) BinlogState(context.Context) (string, bool, error) {
	if err := f.fail["BinlogState"]; err != nil {
		return "", false, err
	}
	return f.state, f.strict, nil
}

// fakeStore holds one checkpoint (nil: none) and fails Save: Resolve only reads.
type fakeStore struct {
	cp      *checkpoint.Checkpoint
	loadErr error
}

func (s fakeStore) Load(context.Context) (*checkpoint.Checkpoint, error) { return s.cp, s.loadErr }
func (s fakeStore) Save(context.Context, checkpoint.Checkpoint) error {
	return errors.New("Resolve saved a checkpoint")
}
func (s fakeStore) Close() error { return nil }

const (
	cpPath = "/var/lib/outboxd/checkpoint.json"
	uuidU  = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidV  = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
)

var (
	tables   = []string{"shop.outbox"}
	errQuery = errors.New("driver: bad connection")
)

// cp is a checkpoint at set written for tables.
func cp(f gtid.Flavor, set string) *checkpoint.Checkpoint {
	return &checkpoint.Checkpoint{Flavor: f, GTIDSet: set, Scope: &checkpoint.Scope{Tables: tables}}
}

// tombstone is a lost checkpoint whose last known position was set.
func tombstone(f gtid.Flavor, set string) *checkpoint.Checkpoint {
	c := checkpoint.Tombstone(*cp(f, set), "outboxd@host-2", "the row was missing at takeover", time.Unix(1_700_000_000, 0))
	return &c
}

type resolveCase struct {
	name   string
	srv    fakeServer
	cp     *checkpoint.Checkpoint
	start  string // source.start
	o      Options
	loadEr error

	wantSet, wantOrigin string   // on success
	wantIs              []error  // on error: errors.Is each
	wantMsg             []string // on error: substrings of the message
	unwanted            string   // on error: not in the message
}

func runResolveCases(t *testing.T, f gtid.Flavor, cases []resolveCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := &config.Config{Tables: []config.Table{{Table: tables[0]}}}
			cfg.Source.Flavor = f
			cfg.Source.Start = c.start
			cfg.Checkpoint.Path = cpPath
			set, origin, err := Resolve(t.Context(), c.srv, cfg, fakeStore{cp: c.cp, loadErr: c.loadEr}, c.o)
			if c.wantIs == nil && c.wantMsg == nil {
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if got := oneLine(set); got != c.wantSet || origin != c.wantOrigin {
					t.Fatalf("Resolve = %q from %q, want %q from %q", got, origin, c.wantSet, c.wantOrigin)
				}
				if set.Flavor() != f {
					t.Errorf("start set flavor %q, want %q", set.Flavor(), f)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve = %q from %q, want an error", oneLine(set), origin)
			}
			for _, want := range c.wantIs {
				if !errors.Is(err, want) {
					t.Errorf("error does not wrap %v: %v", want, err)
				}
			}
			for _, want := range c.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if c.unwanted != "" && strings.Contains(err.Error(), c.unwanted) {
				t.Errorf("error has %q:\n%v", c.unwanted, err)
			}
			if !set.IsEmpty() || origin != "" {
				t.Errorf("a refused start returned %q from %q", oneLine(set), origin)
			}
		})
	}
}

func oneLine(s gtid.Set) string { return strings.ReplaceAll(s.String(), "\n", "") }

// MariaDB: two domains, the server wrote 0-1-10 and 1-2-5; what e2e TestPurgedStartIsRefused,
// TestStartAheadIsRefused, TestReplayFromGTID and the scope tests cover, and what they cannot
// reach (a second domain, strict mode, a failing query).
func TestResolveMariaDB(t *testing.T) {
	const pos = "0-1-10,1-2-5"
	srv := fakeServer{pos: pos, state: pos}
	purged := fakeServer{pos: pos, state: pos, purged: "0-1-8,1-2-2"}
	noState := fakeServer{pos: pos, state: pos, fail: map[string]error{"BinlogState": errQuery}}
	cases := []resolveCase{
		// First start, no checkpoint.
		{name: "latest by default", srv: purged, wantSet: pos, wantOrigin: "source.start: latest"},
		{name: "latest", srv: purged, start: " latest ", wantSet: pos, wantOrigin: "source.start: latest"},
		{name: "earliest, nothing purged", srv: srv, start: "earliest", wantSet: "", wantOrigin: "source.start: earliest"},
		{name: "earliest is the oldest binlog", srv: purged, start: "earliest", wantSet: "0-1-8,1-2-2", wantOrigin: "source.start: earliest (the oldest binlog)"},
		{name: "earliest, purged unreadable", srv: fakeServer{pos: pos, fail: map[string]error{"Purged": errQuery}}, start: "earliest",
			wantIs: []error{errQuery}, wantMsg: []string{"source.start: earliest: find the oldest binlog's position"}},
		{name: "explicit set", srv: purged, start: "0-1-9,1-2-3", wantSet: "0-1-9,1-2-3", wantOrigin: "source.start"},
		{name: "explicit set, malformed", srv: srv, start: "0-1", wantMsg: []string{"source.start: "}},
		// A set that omits a domain would replay it from its first transaction.
		{name: "explicit set lacks a domain", srv: srv, start: "0-1-9",
			wantMsg: []string{"source.start 0-1-9 lacks domains 1 that the server has (" + pos + ")", "replay them from their first transaction", "--force"}},
		{name: "explicit set lacks a domain, force", srv: srv, start: "0-1-9", o: Options{Force: true}, wantSet: "0-1-9", wantOrigin: "source.start"},
		{name: "explicit set lacks a purged domain, force", srv: purged, start: "0-1-9", o: Options{Force: true},
			wantIs:  []error{ErrPurged},
			wantMsg: []string{"domain 1: 1-2-1 … 1-2-2 are purged", "the start set has no position for domain 1", "--force does not bypass"}},
		{name: "explicit set ahead", srv: srv, start: "0-1-11,1-2-5", o: Options{Force: true},
			wantIs: []error{ErrAhead}, wantMsg: []string{"set source.start to a set the server has, such as its position '" + pos + "'"}, unwanted: "--from-gtid"},
		{name: "explicit set purged", srv: purged, start: "0-1-5,1-2-5",
			wantIs: []error{ErrPurged}, wantMsg: []string{"source.start 0-1-5,1-2-5 needs transactions", "domain 0: 0-1-6 … 0-1-8 are purged; the oldest binlog starts after 0-1-8", "'0-1-8,1-2-5'", cpPath, "data loss"}},

		// A checkpoint.
		{name: "checkpoint", srv: purged, start: "earliest", cp: cp(gtid.MariaDB, "0-1-9,1-2-4"), wantSet: "0-1-9,1-2-4", wantOrigin: OriginCheckpoint},
		{name: "checkpoint without a scope is adopted", srv: srv, cp: &checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-9,1-2-4"},
			wantSet: "0-1-9,1-2-4", wantOrigin: OriginCheckpoint},
		// Missing sources were checked when the set was first chosen; a checkpoint is not
		// checked for them again (a domain created since starts at its first transaction).
		{name: "checkpoint lacking a domain the server has", srv: srv, cp: cp(gtid.MariaDB, "0-1-9"), wantSet: "0-1-9", wantOrigin: OriginCheckpoint},
		{name: "checkpoint lacking a purged domain", srv: purged, cp: cp(gtid.MariaDB, "0-1-9"),
			wantIs: []error{ErrPurged}, wantMsg: []string{"checkpoint 0-1-9 needs", "domain 1: 1-2-1 … 1-2-2 are purged", "the start set has no position for domain 1"}},
		{name: "checkpoint ahead", srv: srv, cp: cp(gtid.MariaDB, "0-1-99,1-2-5"), o: Options{Force: true},
			wantIs: []error{ErrAhead},
			wantMsg: []string{"start position is ahead of the server: checkpoint 0-1-99,1-2-5 names transactions the server has not written (the server's position is " + pos + ")",
				"domain 0: 0-1-99 is ahead of server id 1's last transaction in it, 0-1-10", "outboxd checkpoint set --gtid '" + pos + "'", "--force does not bypass"},
			unwanted: "--from-gtid"},
		{name: "checkpoint ahead in the second domain", srv: srv, cp: cp(gtid.MariaDB, "0-1-10,1-2-6"),
			wantIs: []error{ErrAhead}, wantMsg: []string{"domain 1: 1-2-6 is ahead of server id 2's last transaction in it, 1-2-5"}},
		{name: "checkpoint of another server id, not strict", srv: srv, cp: cp(gtid.MariaDB, "0-7-99,1-2-5"), wantSet: "0-7-99,1-2-5", wantOrigin: OriginCheckpoint},
		{name: "checkpoint of another server id, strict", srv: fakeServer{pos: pos, state: pos, strict: true}, cp: cp(gtid.MariaDB, "0-7-99,1-2-5"),
			wantIs: []error{ErrAhead}, wantMsg: []string{"0-7-99 is ahead of the domain's last transaction 0-1-10 (gtid_strict_mode"}},
		{name: "checkpoint, gtid_binlog_state unreadable", srv: noState, cp: cp(gtid.MariaDB, "0-1-9,1-2-4"),
			wantIs: []error{errQuery}, wantMsg: []string{"read the server's gtid_binlog_state to check checkpoint 0-1-9,1-2-4"}},
		{name: "checkpoint purged", srv: purged, cp: cp(gtid.MariaDB, "0-1-5,1-2-5"), o: Options{Force: true},
			wantIs: []error{ErrPurged}, wantMsg: []string{"checkpoint 0-1-5,1-2-5 needs", "domain 0: 0-1-6 … 0-1-8 are purged", "outboxd run --from-gtid '0-1-8,1-2-5'", "--force does not bypass"}},
		{name: "checkpoint of the other flavor", srv: srv, cp: cp(gtid.MySQL, uuidU+":1-3"),
			wantMsg: []string{"checkpoint " + cpPath + " is for flavor mysql but source.flavor is mariadb"}},
		{name: "checkpoint load fails", srv: srv, loadEr: errQuery, wantIs: []error{errQuery}},
		{name: "checkpoint of other tables", srv: srv, cp: &checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-9,1-2-4", Scope: &checkpoint.Scope{Tables: []string{"shop.other"}}},
			wantIs: []error{checkpoint.ErrScopeMismatch}},
		// A lost checkpoint is never replaced by source.start, whatever it says.
		{name: "tombstone, start latest", srv: srv, start: "latest", cp: tombstone(gtid.MariaDB, "0-1-9,1-2-4"),
			wantIs: []error{checkpoint.ErrCheckpointLost}, wantMsg: []string{"is not replaced by a guess", "0-1-9,1-2-4"}},
		{name: "tombstone, start earliest, force", srv: purged, start: "earliest", o: Options{Force: true}, cp: tombstone(gtid.MariaDB, "0-1-9,1-2-4"),
			wantIs: []error{checkpoint.ErrCheckpointLost}},

		// --from-gtid.
		{name: "from-gtid over a checkpoint", srv: purged, cp: cp(gtid.MariaDB, "0-1-10,1-2-5"), o: Options{FromGTID: "0-1-8,1-2-3"},
			wantSet: "0-1-8,1-2-3", wantOrigin: "--from-gtid"},
		{name: "from-gtid without a checkpoint", srv: srv, start: "latest", o: Options{FromGTID: "0-1-2,1-2-3"}, wantSet: "0-1-2,1-2-3", wantOrigin: "--from-gtid"},
		{name: "from-gtid, malformed", srv: srv, o: Options{FromGTID: "zero"}, wantMsg: []string{"--from-gtid: "}},
		{name: "from-gtid lacks a domain", srv: srv, o: Options{FromGTID: "1-2-3"}, wantMsg: []string{"--from-gtid 1-2-3 lacks domains 0"}},
		{name: "from-gtid lacks a domain, force", srv: srv, o: Options{FromGTID: "1-2-3", Force: true}, wantSet: "1-2-3", wantOrigin: "--from-gtid"},
		{name: "from-gtid ahead, force", srv: srv, o: Options{FromGTID: "0-1-1000010,1-2-5", Force: true},
			wantIs: []error{ErrAhead}, wantMsg: []string{"domain 0: 0-1-1000010 is ahead of server id 1's last transaction in it", "--from-gtid '" + pos + "'"}},
		{name: "from-gtid purged, force", srv: purged, o: Options{FromGTID: "0-1-3,1-2-5", Force: true},
			wantIs: []error{ErrPurged}, wantMsg: []string{"--from-gtid 0-1-3,1-2-5", "domain 0: 0-1-4 … 0-1-8 are purged", "--from-gtid '0-1-8,1-2-5'", "source.start: latest", "data loss"}},
		{name: "from-gtid over a tombstone", srv: srv, cp: tombstone(gtid.MariaDB, "0-1-9,1-2-4"), o: Options{FromGTID: "0-1-9,1-2-4", Force: true},
			wantIs: []error{checkpoint.ErrCheckpointLost}, wantMsg: []string{"--from-gtid does not replace this checkpoint"}},
		{name: "from-gtid over another config's checkpoint", srv: srv, o: Options{FromGTID: "0-1-9,1-2-4"},
			cp:     &checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-9,1-2-4", Scope: &checkpoint.Scope{Tables: []string{"shop.outbox", "shop.other"}}},
			wantIs: []error{checkpoint.ErrScopeMismatch}, wantMsg: []string{"--from-gtid does not replace this checkpoint"}},

		// The server's position decides latest and every check: without it nothing starts.
		{name: "position unreadable", srv: fakeServer{fail: map[string]error{"Position": errQuery}},
			wantIs: []error{errQuery}, wantMsg: []string{"read the server's GTID position"}},
	}
	runResolveCases(t, gtid.MariaDB, cases)
}

// MySQL: gtid_executed u:1-10,v:1-3 with u:1-2 purged. gtid_binlog_state is MariaDB's only:
// it fails here, so a MySQL check that queried it would show.
func TestResolveMySQL(t *testing.T) {
	pos := uuidU + ":1-10," + uuidV + ":1-3"
	srv := fakeServer{pos: pos, purged: uuidU + ":1-2", fail: map[string]error{"BinlogState": errors.New("no gtid_binlog_state on MySQL")}}
	fresh := fakeServer{pos: pos, fail: srv.fail}
	cases := []resolveCase{
		{name: "latest", srv: srv, wantSet: pos, wantOrigin: "source.start: latest"},
		{name: "earliest is gtid_purged", srv: srv, start: "earliest", wantSet: uuidU + ":1-2", wantOrigin: "source.start: earliest (the oldest binlog)"},
		{name: "earliest, nothing purged", srv: fresh, start: "earliest", wantSet: "", wantOrigin: "source.start: earliest"},
		{name: "explicit set", srv: srv, start: uuidU + ":1-5," + uuidV + ":1", wantSet: uuidU + ":1-5," + uuidV + ":1", wantOrigin: "source.start"},
		{name: "explicit set lacks a UUID", srv: srv, start: uuidU + ":1-5",
			wantMsg: []string{"lacks server UUIDs " + uuidV + " that the server has"}},
		{name: "explicit set lacks a UUID, force", srv: srv, start: uuidU + ":1-5", o: Options{Force: true}, wantSet: uuidU + ":1-5", wantOrigin: "source.start"},
		{name: "checkpoint", srv: srv, cp: cp(gtid.MySQL, pos), wantSet: pos, wantOrigin: OriginCheckpoint},
		{name: "checkpoint ahead", srv: srv, cp: cp(gtid.MySQL, uuidU+":1-11,"+uuidV+":1-3"), o: Options{Force: true},
			wantIs: []error{ErrAhead}, wantMsg: []string{uuidU + ":11 are not in @@gtid_executed", "outboxd checkpoint set --gtid"}},
		{name: "checkpoint purged", srv: srv, cp: cp(gtid.MySQL, uuidU+":1,"+uuidV+":1-3"),
			wantIs: []error{ErrPurged}, wantMsg: []string{uuidU + ":2 are purged (@@gtid_purged is " + uuidU + ":1-2)"}},
		{name: "from-gtid with a gap in what was purged", srv: srv, o: Options{FromGTID: uuidU + ":2-10," + uuidV + ":1-3"},
			wantIs: []error{ErrPurged}, wantMsg: []string{uuidU + ":1 are purged"}},
		{name: "checkpoint of the other flavor", srv: srv, cp: cp(gtid.MariaDB, "0-1-9"),
			wantMsg: []string{"is for flavor mariadb but source.flavor is mysql"}},
		{name: "tombstone", srv: srv, start: "latest", cp: tombstone(gtid.MySQL, pos), wantIs: []error{checkpoint.ErrCheckpointLost}},
	}
	runResolveCases(t, gtid.MySQL, cases)
}

// checkpoint set validates its --gtid as a start and names itself in the fix.
func TestValidateCheckpointSet(t *testing.T) {
	cfg := &config.Config{}
	cfg.Source.Flavor = gtid.MariaDB
	cfg.Checkpoint.Path = cpPath
	srv := fakeServer{pos: "0-1-10", state: "0-1-10", purged: "0-1-4"}
	for set, want := range map[string]string{
		"0-1-7":  "",
		"0-1-11": "outboxd checkpoint set --gtid '0-1-10'",
		"0-1-2":  "outboxd checkpoint set --gtid '0-1-4'",
	} {
		start, err := gtid.Parse(gtid.MariaDB, set)
		if err != nil {
			t.Fatal(err)
		}
		err = Validate(t.Context(), srv, cfg, start, OriginCheckpointSet, false)
		switch {
		case want == "" && err != nil:
			t.Errorf("Validate(%s): %v", set, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "--from-gtid")):
			t.Errorf("Validate(%s) = %v, want an error naming %q and not --from-gtid", set, err, want)
		}
	}
	if err := Validate(t.Context(), fakeServer{fail: map[string]error{"Position": errQuery}}, cfg, gtid.Empty(gtid.MariaDB), OriginCheckpointSet, false); !errors.Is(err, errQuery) {
		t.Errorf("Validate with the position unreadable = %v, want %v", err, errQuery)
	}
}
