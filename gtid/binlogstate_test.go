package gtid

import "testing"

func TestParseBinlogState(t *testing.T) {
	b, err := ParseBinlogState(" 0-1-8, 0-2-50,\n1-1-3,")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		domain, server uint32
		want           uint64
		ok             bool
	}{{0, 1, 8, true}, {0, 2, 50, true}, {1, 1, 3, true}, {1, 2, 0, false}, {2, 1, 0, false}} {
		if n, ok := b.Last(c.domain, c.server); n != c.want || ok != c.ok {
			t.Errorf("Last(%d, %d) = %d, %v; want %d, %v", c.domain, c.server, n, ok, c.want, c.ok)
		}
	}
	if b.MaxSeq(0) != 50 || b.MaxSeq(1) != 3 || b.MaxSeq(7) != 0 {
		t.Errorf("MaxSeq: %d %d %d, want 50 3 0", b.MaxSeq(0), b.MaxSeq(1), b.MaxSeq(7))
	}
	if e, err := ParseBinlogState(""); err != nil || e.MaxSeq(0) != 0 {
		t.Errorf("empty state: %v", err)
	}
	var zero BinlogState
	if _, ok := zero.Last(0, 1); ok {
		t.Error("zero state has a position")
	}
	for _, bad := range []string{"0-1", "0-1-x", "a-1-2", "0-1-2-3", "0--2"} {
		if _, err := ParseBinlogState(bad); err == nil {
			t.Errorf("ParseBinlogState(%q): want an error", bad)
		}
	}
}
