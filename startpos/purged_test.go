package startpos

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func TestPurgedGap(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		flavor              gtid.Flavor
		start, purged       string
		wantLines, wantNear string
	}{
		{gtid.MariaDB, "0-1-5", "", "", "0-1-5"},
		{gtid.MariaDB, "0-1-41", "0-1-41", "", "0-1-41"},
		{gtid.MariaDB, "0-1-50", "0-1-41", "", "0-1-50"},
		{gtid.MariaDB, "0-1-5,7-2-9", "0-1-41,7-2-3", "domain 0: 0-1-6 … 0-1-41 are purged; the oldest binlog starts after 0-1-41", "0-1-41,7-2-9"},
		{gtid.MariaDB, "0-1-5", "0-1-3,7-2-3", "domain 7: 7-2-1 … 7-2-3 are purged; the oldest binlog starts after 7-2-3 (the start set has no position for domain 7", "0-1-5,7-2-3"},
		{gtid.MySQL, u + ":1-10", u + ":1-5", "", u + ":1-10"},
		{gtid.MySQL, u + ":1-3", u + ":1-5", u + ":4-5 are purged", u + ":1-5"},
	}
	for _, c := range cases {
		start, err := gtid.Parse(c.flavor, c.start)
		if err != nil {
			t.Fatal(err)
		}
		purged, err := gtid.Parse(c.flavor, c.purged)
		if err != nil {
			t.Fatal(err)
		}
		lines, near, err := PurgedGap(start, purged)
		if err != nil {
			t.Fatalf("%s vs %s: %v", c.start, c.purged, err)
		}
		got := strings.Join(lines, "\n")
		if (c.wantLines == "") != (got == "") || !strings.Contains(got, c.wantLines) {
			t.Errorf("%s vs purged %s: lines %q, want %q", c.start, c.purged, got, c.wantLines)
		}
		if near.String() != c.wantNear {
			t.Errorf("%s vs purged %s: nearest %q, want %q", c.start, c.purged, near.String(), c.wantNear)
		}
	}
}
