package binlog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
)

// A synthesised stream: "0-1-5" is a MariaDB transaction (GTID event and XID), "list:0-1-3"
// the Gtid_list at a binlog file's start, "fake:0-1-3" the artificial one MariaDB sends when a
// domain reaches the slave's position, "uuid:7" / "uuid:tag:7" a MySQL transaction (GTID,
// BEGIN, XID) and "anon" a MySQL anonymous one.
type streamStep string

func streamEvents(t *testing.T, steps ...streamStep) []*replication.BinlogEvent {
	t.Helper()
	var evs []*replication.BinlogEvent
	pos := uint32(4)
	add := func(typ replication.EventType, e replication.Event, flags uint16) {
		pos += 100
		b := ev(typ, pos, e)
		b.Header.Flags = flags
		evs = append(evs, b)
	}
	for _, s := range steps {
		kind, rest, hasKind := strings.Cut(string(s), ":")
		switch {
		case hasKind && (kind == "list" || kind == "fake"):
			var list []mysql.MariadbGTID
			for _, g := range strings.Split(rest, ",") {
				if g == "" {
					continue
				}
				mg, err := mysql.ParseMariadbGTID(g)
				if err != nil {
					t.Fatal(err)
				}
				list = append(list, *mg)
			}
			var flags uint16
			if kind == "fake" {
				flags = logEventArtificial
			}
			add(replication.MARIADB_GTID_LIST_EVENT, &replication.MariadbGTIDListEvent{GTIDs: list}, flags)
		case s == "anon":
			add(replication.ANONYMOUS_GTID_EVENT, &replication.GTIDEvent{}, 0)
			add(replication.QUERY_EVENT, &replication.QueryEvent{Query: []byte("BEGIN")}, 0)
			add(replication.XID_EVENT, &replication.XIDEvent{}, 0)
		case strings.Count(string(s), "-") == 2 && !strings.Contains(string(s), ":"):
			mg, err := mysql.ParseMariadbGTID(string(s))
			if err != nil {
				t.Fatal(err)
			}
			add(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{GTID: *mg}, 0)
			add(replication.XID_EVENT, &replication.XIDEvent{}, 0)
		default: // MySQL uuid[:tag]:gno
			f := strings.Split(string(s), ":")
			u := uuid.MustParse(f[0])
			gno, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				t.Fatalf("step %q: %v", s, err)
			}
			g := replication.GTIDEvent{SID: u[:], GNO: gno}
			if len(f) == 3 {
				g.Tag = mysql.NewTag(f[1])
				add(replication.GTID_TAGGED_LOG_EVENT, &replication.GtidTaggedLogEvent{GTIDEvent: g}, 0)
			} else {
				add(replication.GTID_EVENT, &g, 0)
			}
			add(replication.QUERY_EVENT, &replication.QueryEvent{Query: []byte("BEGIN")}, 0)
			add(replication.XID_EVENT, &replication.XIDEvent{}, 0)
		}
	}
	return evs
}

// filtered runs the stream through the start filter and the Assembler as Reader.Run does and
// returns the GTIDs delivered and the number skipped.
func filtered(t *testing.T, flavor gtid.Flavor, start string, steps ...streamStep) ([]string, int) {
	t.Helper()
	set, err := gtid.Parse(flavor, start)
	if err != nil {
		t.Fatal(err)
	}
	asm := NewAssembler(AssemblerConfig{Flavor: flavor, Tables: []TableSpec{{Schema: "s", Table: "outbox"}},
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	f := newStartFilter(set)
	var got []string
	for _, e := range streamEvents(t, steps...) {
		txn, skip, err := assemble(context.Background(), asm, f, e)
		if err != nil {
			t.Fatal(err)
		}
		if txn != nil && !skip {
			got = append(got, txn.GTID)
		}
	}
	return got, f.skipped
}

func wantDelivered(t *testing.T, name string, got []string, skipped int, want []string, wantSkipped int) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) || skipped != wantSkipped {
		t.Errorf("%s: delivered %v, skipped %d; want %v, skipped %d", name, got, skipped, want, wantSkipped)
	}
}

func TestStartFilterMariaDB(t *testing.T) {
	cases := []struct {
		name        string
		start       string
		stream      []streamStep
		want        []string
		wantSkipped int
	}{
		{"server ignores the position and streams from the beginning", "0-1-3",
			[]streamStep{"list:", "0-1-1", "0-1-2", "0-1-3", "0-1-4", "0-1-5"},
			[]string{"0-1-4", "0-1-5"}, 3},
		// What MariaDB 10.11 sends (sql_repl.cc): it skips up to and including 0-1-3 itself and
		// marks the reached position with an artificial Gtid_list that lists it.
		{"server honours the position", "0-1-3",
			[]streamStep{"list:", "fake:0-1-3", "0-1-4", "0-1-5"},
			[]string{"0-1-4", "0-1-5"}, 0},
		// The resume GTID was the last of its domain before this file: the server starts at the
		// file's beginning and sends no artificial Gtid_list; the file's own list names it.
		{"position at a binlog file's start", "0-1-6",
			[]streamStep{"list:0-1-6", "0-1-7"},
			[]string{"0-1-7"}, 0},
		// gtid_strict_mode off, a failover to server 2 that continued with lower numbers: what
		// comes after the resume GTID is new, whatever its sequence number.
		{"lower seq after the resume GTID, server streams everything", "0-1-10",
			[]streamStep{"list:", "0-1-9", "0-1-10", "0-2-5", "0-2-6"},
			[]string{"0-2-5", "0-2-6"}, 2},
		{"lower seq after the resume GTID, server honours", "0-1-10",
			[]streamStep{"list:0-1-8", "fake:0-1-10", "0-2-5", "0-2-6"},
			[]string{"0-2-5", "0-2-6"}, 0},
		// A lower seq from another server before the resume GTID is covered by it.
		{"lower seq from another server before the resume GTID", "0-1-10",
			[]streamStep{"list:", "0-2-3", "0-1-10", "0-1-11"},
			[]string{"0-1-11"}, 2},
		{"several domains, server streams everything", "0-1-3,1-2-7",
			[]streamStep{"list:", "0-1-1", "1-2-6", "2-5-1", "0-1-2", "1-2-7", "0-1-3", "1-2-8", "0-1-4", "2-5-2"},
			[]string{"2-5-1", "1-2-8", "0-1-4", "2-5-2"}, 5},
		// Domain 1 reaches first; the server goes on skipping domain 0 itself, so the first
		// artificial list ends the client's skipping everywhere.
		{"several domains, server honours", "0-1-3,1-2-7",
			[]streamStep{"list:", "fake:1-2-7,0-1-2", "1-2-8", "fake:1-2-8,0-1-3", "0-1-4"},
			[]string{"1-2-8", "0-1-4"}, 0},
		// A promoted replica whose binlog lacks the resume GTID starts at its own next group:
		// it sends that group's GTID event, then the artificial list, then the rest of it.
		{"server starts at a group after a missing resume GTID", "0-1-5",
			[]streamStep{"list:", "0-3-6", "fake:0-3-6", "0-3-7"},
			[]string{"0-3-6", "0-3-7"}, 0},
		// The same server deleted the domain from the dump's position without any list: a
		// higher sequence number is not shown to precede the resume GTID, so it is delivered.
		{"resume GTID never streams, higher seq follows", "0-1-5",
			[]streamStep{"list:", "0-3-6", "0-3-7"},
			[]string{"0-3-6", "0-3-7"}, 0},
		{"domain absent from the start set is streamed from its beginning", "0-1-3",
			[]streamStep{"fake:0-1-3", "7-1-1", "7-1-2"},
			[]string{"7-1-1", "7-1-2"}, 0},
		{"empty start set skips nothing", "",
			[]streamStep{"list:", "0-1-1", "0-1-2"},
			[]string{"0-1-1", "0-1-2"}, 0},
	}
	for _, c := range cases {
		got, skipped := filtered(t, gtid.MariaDB, c.start, c.stream...)
		wantDelivered(t, c.name, got, skipped, c.want, c.wantSkipped)
	}
}

func TestStartFilterMySQL(t *testing.T) {
	const a = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const b = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		name        string
		start       string
		stream      []streamStep
		want        []string
		wantSkipped int
	}{
		// Dolt ignores the GTID set and streams its whole binlog at every connect.
		{"server ignores the set", a + ":1-3",
			[]streamStep{a + ":1", a + ":2", a + ":3", a + ":4", a + ":5"},
			[]string{a + ":4", a + ":5"}, 3},
		{"server honours the set", a + ":1-3",
			[]streamStep{a + ":4"},
			[]string{a + ":4"}, 0},
		{"a gap in the set is not covered", a + ":1-3:5",
			[]streamStep{a + ":1", a + ":2", a + ":3", a + ":4", a + ":5", a + ":6"},
			[]string{a + ":4", a + ":6"}, 4},
		{"tagged GTIDs", a + ":1-2:mytag:1",
			[]streamStep{a + ":1", a + ":mytag:1", a + ":mytag:2", a + ":other:1", a + ":2", a + ":3"},
			[]string{a + ":mytag:2", a + ":other:1", a + ":3"}, 3},
		{"another source", a + ":1-5",
			[]streamStep{b + ":1", a + ":5", a + ":6"},
			[]string{b + ":1", a + ":6"}, 1},
		{"anonymous transactions are never covered", a + ":1-5",
			[]streamStep{"anon", a + ":1"},
			[]string{""}, 1},
	}
	for _, c := range cases {
		got, skipped := filtered(t, gtid.MySQL, c.start, c.stream...)
		wantDelivered(t, c.name, got, skipped, c.want, c.wantSkipped)
	}
}

// The pieces of a large covered transaction are all skipped, and it counts once.
func TestStartFilterPieces(t *testing.T) {
	set, err := gtid.Parse(gtid.MariaDB, "0-1-3")
	if err != nil {
		t.Fatal(err)
	}
	f := newStartFilter(set)
	for _, p := range []*Txn{{GTID: "0-1-2", Partial: true}, {GTID: "0-1-2", Partial: true}, {GTID: "0-1-2"},
		{GTID: "0-1-3", Partial: true}, {GTID: "0-1-3"}} {
		if skip, err := f.covered(p); err != nil || !skip {
			t.Fatalf("piece of %s: skip %v, %v", p.GTID, skip, err)
		}
	}
	for _, p := range []*Txn{{GTID: "0-1-4", Partial: true}, {GTID: "0-1-4"}} {
		if skip, err := f.covered(p); err != nil || skip {
			t.Fatalf("piece of %s: skip %v, %v", p.GTID, skip, err)
		}
	}
	if f.skipped != 2 {
		t.Errorf("skipped = %d, want 2 transactions", f.skipped)
	}
	if _, err := newStartFilter(set).covered(&Txn{GTID: "nonsense"}); err == nil {
		t.Error("a malformed GTID must be an error")
	}
}
