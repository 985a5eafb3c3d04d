package startpos

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func TestMariaDBAhead(t *testing.T) {
	cases := []struct {
		name, start, pos, state string
		strict                  bool
		want                    string // "" for not ahead; else a substring of the one line
	}{
		{"behind", "0-1-5", "0-1-8", "0-1-8", false, ""},
		{"equal", "0-1-8", "0-1-8", "0-1-8", false, ""},
		{"ahead, same server id", "0-1-9999", "0-1-8", "0-1-8", false, "domain 0: 0-1-9999 is ahead of server id 1's last transaction in it, 0-1-8"},
		// Non-strict: the domain's last GTID is another server's lower number; server 1's own
		// 0-1-100 is still in the binlog.
		{"lower number of another server later", "0-1-100", "0-2-50", "0-1-100,0-2-50", false, ""},
		{"ahead of its own server, other server last", "0-1-101", "0-2-50", "0-1-100,0-2-50", false, "0-1-101 is ahead of server id 1's last transaction in it, 0-1-100"},
		// A server id that never wrote to the domain: only strict mode makes the numbers decide.
		{"unknown server id, not strict", "0-7-9", "0-1-8", "0-1-8", false, ""},
		{"unknown server id, strict", "0-7-9", "0-1-8", "0-1-8", true, "0-7-9 is ahead of the domain's last transaction 0-1-8"},
		{"unknown server id, strict, behind", "0-7-3", "0-1-8", "0-1-8", true, ""},
		// A domain the server never wrote is not decided here.
		{"unknown domain", "0-1-8,5-1-3", "0-1-8", "0-1-8", true, ""},
		{"second domain ahead", "0-1-8,1-1-4", "0-1-8,1-1-3", "0-1-8,1-1-3", false, "domain 1: 1-1-4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start, err := gtid.Parse(gtid.MariaDB, c.start)
			if err != nil {
				t.Fatal(err)
			}
			pos, err := gtid.Parse(gtid.MariaDB, c.pos)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := MariaDBAhead(start, pos, c.state, c.strict)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if len(lines) != 0 {
					t.Errorf("want not ahead, got %q", lines)
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("got %q, want one line with %q", lines, c.want)
			}
		})
	}
	if _, err := MariaDBAhead(gtid.Empty(gtid.MariaDB), gtid.Empty(gtid.MariaDB), "0-1", false); err == nil {
		t.Error("a malformed gtid_binlog_state was accepted")
	}
}

func TestMySQLAhead(t *testing.T) {
	const u, v = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	exec, err := gtid.Parse(gtid.MySQL, u+":1-10,"+v+":1-3")
	if err != nil {
		t.Fatal(err)
	}
	for start, want := range map[string]string{
		u + ":1-10":              "",
		u + ":1-5," + v + ":1-3": "",
		u + ":1-11":              u + ":11 are not in @@gtid_executed",
		u + ":1-10," + v + ":5":  v + ":5 are not in @@gtid_executed",
	} {
		s, err := gtid.Parse(gtid.MySQL, start)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(MySQLAhead(s, exec), "|")
		if got != want {
			t.Errorf("MySQLAhead(%s) = %q, want %q", start, got, want)
		}
	}
}

// Each command's fix names that command, never another one's flag.
func TestStartFix(t *testing.T) {
	for origin, want := range map[string]string{
		OriginCheckpointSet: "outboxd checkpoint set --gtid '0-1-8'",
		"source.start":      "set source.start to a set the server has",
		"--from-gtid":       "--from-gtid '0-1-8'",
		"checkpoint":        "outboxd checkpoint set --gtid '0-1-8'",
	} {
		got := startFix(origin, "0-1-8")
		if !strings.Contains(got, want) {
			t.Errorf("startFix(%q) = %q, want %q", origin, got, want)
		}
		if origin != "--from-gtid" && strings.Contains(got, "--from-gtid") {
			t.Errorf("startFix(%q) talks about --from-gtid: %q", origin, got)
		}
	}
}
