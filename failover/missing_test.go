package failover

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func TestMariaDBMissing(t *testing.T) {
	for _, c := range []struct {
		name, pos, state   string
		lacks, behind, sok bool
		count              uint64
		shared, line       string
	}{
		{name: "has it", pos: "0-1-100", state: "0-1-100", sok: true, shared: "0-1-100"},
		{name: "has it and more", pos: "0-1-100,1-1-7", state: "0-1-120,0-2-130,1-1-9", sok: true, shared: "0-1-100,1-1-7"},
		// The promoted replica got 0-1-1..100, then wrote 0-2-101..: 0-1-101..105 are gone.
		{name: "diverged after an async failover", pos: "0-1-105", state: "0-1-100,0-2-130", lacks: true, sok: true, count: 5,
			shared: "0-1-100", line: "domain 0: 0-1-101..0-1-105 (the server's last of server id 1 there is 0-1-100)"},
		// Same sequence number, another server: a set comparison would call it contained.
		{name: "same number, other server", pos: "0-1-105", state: "0-1-104,0-2-105", lacks: true, sok: true, count: 1, shared: "0-1-104"},
		{name: "a replica behind", pos: "0-1-105", state: "0-1-103", lacks: true, behind: true, sok: true, count: 2, shared: "0-1-103"},
		{name: "never had the server", pos: "0-1-105", state: "0-2-200", lacks: true, count: 105},
		{name: "one domain of two", pos: "0-1-10,1-1-50", state: "0-1-10,1-1-40,1-3-60", lacks: true, sok: true, count: 10, shared: "0-1-10,1-1-40"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pos, err := gtid.Parse(gtid.MariaDB, c.pos)
			if err != nil {
				t.Fatal(err)
			}
			m, err := MariaDBMissing(pos, c.state)
			if err != nil {
				t.Fatal(err)
			}
			if m.Lacks() != c.lacks || m.Behind != c.behind || m.SharedOK != c.sok || m.Count != c.count {
				t.Fatalf("%+v", m)
			}
			if c.sok && m.Shared.String() != c.shared {
				t.Fatalf("shared %s, want %s", m.Shared, c.shared)
			}
			if c.line != "" && (len(m.Lines) != 1 || m.Lines[0] != c.line) {
				t.Fatalf("lines %q", m.Lines)
			}
		})
	}
}

func TestMySQLMissing(t *testing.T) {
	const a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4f22ab58-82db-22f2-af44-d91bb0530673"
	pos, _ := gtid.Parse(gtid.MySQL, a+":1-105,"+b+":1-7")
	exec, _ := gtid.Parse(gtid.MySQL, a+":1-100,"+b+":1-20")
	m := MySQLMissing(pos, exec)
	if !m.Lacks() || m.Count != 5 || !m.SharedOK || m.Behind {
		t.Fatalf("%+v", m)
	}
	if want, _ := gtid.Parse(gtid.MySQL, a+":1-100,"+b+":1-7"); !m.Shared.Equal(want) {
		t.Fatalf("shared %s, want %s", m.Shared, want)
	}
	if !strings.Contains(m.Lines[0], a+":101-105") {
		t.Fatalf("lines %q", m.Lines)
	}
	if m := MySQLMissing(exec.Subtract(exec), exec); m.Lacks() {
		t.Fatalf("empty position lacks %+v", m)
	}
}

// MySQL 8.4 tagged GTIDs: a tag is its own sequence, lost or kept apart from the untagged one.
func TestMySQLMissingTagged(t *testing.T) {
	const a = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	pos, err := gtid.Parse(gtid.MySQL, a+":1-50:outbox:1-12")
	if err != nil {
		t.Fatal(err)
	}
	exec, _ := gtid.Parse(gtid.MySQL, a+":1-60:outbox:1-9")
	m := MySQLMissing(pos, exec)
	if m.Count != 3 || !strings.Contains(m.Lines[0], "outbox:10-12") {
		t.Fatalf("%+v", m)
	}
	if want, _ := gtid.Parse(gtid.MySQL, a+":1-50:outbox:1-9"); !m.Shared.Equal(want) {
		t.Fatalf("shared %s, want %s", m.Shared, want)
	}
}
