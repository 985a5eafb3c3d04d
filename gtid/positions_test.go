package gtid

import (
	"slices"
	"strings"
	"testing"
)

func TestPositions(t *testing.T) {
	s, err := Parse(MariaDB, "10-3-7,0-1-42,2-2-0")
	if err != nil {
		t.Fatal(err)
	}
	want := []Position{{0, 1, 42}, {2, 2, 0}, {10, 3, 7}}
	got := s.Positions()
	if !slices.Equal(got, want) {
		t.Errorf("Positions() = %v, want %v", got, want)
	}
	var txt []string
	for _, p := range got {
		txt = append(txt, p.String())
	}
	if s.String() != strings.Join(txt, ",") {
		t.Errorf("positions print %v, the set prints %q", txt, s.String())
	}
	if p, ok := s.Position(10); !ok || p != (Position{10, 3, 7}) {
		t.Errorf("Position(10) = %v, %v", p, ok)
	}
	if _, ok := s.Position(1); ok {
		t.Error("Position(1): the set has no domain 1")
	}
	got[0].Seq = 99
	if p, _ := s.Position(0); p.Seq != 42 {
		t.Error("changing Positions' result changed the set")
	}
	my, err := Parse(MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []Set{my, Empty(MariaDB), {}} {
		if ps := set.Positions(); ps != nil {
			t.Errorf("%s %q: Positions() = %v, want nil", set.Flavor(), set.String(), ps)
		}
		if _, ok := set.Position(0); ok {
			t.Errorf("%s %q: Position(0) found", set.Flavor(), set.String())
		}
	}
}
