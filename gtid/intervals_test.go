package gtid

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		in   []Interval
		want []Interval
	}{
		{"nil", nil, nil},
		{"one", []Interval{{3, 4}}, []Interval{{3, 4}}},
		{"adjacent merge", []Interval{{1, 4}, {4, 6}}, []Interval{{1, 6}}},
		{"adjacent out of order", []Interval{{4, 6}, {1, 4}}, []Interval{{1, 6}}},
		{"gap of one stays", []Interval{{1, 4}, {5, 6}}, []Interval{{1, 4}, {5, 6}}},
		{"overlap", []Interval{{1, 6}, {3, 9}}, []Interval{{1, 9}}},
		{"inside", []Interval{{1, 10}, {3, 4}}, []Interval{{1, 10}}},
		{"same start", []Interval{{2, 5}, {2, 3}}, []Interval{{2, 5}}},
		{"chain", []Interval{{7, 8}, {1, 2}, {3, 4}, {2, 3}, {10, 11}, {8, 10}}, []Interval{{1, 4}, {7, 11}}},
	}
	for _, tt := range tests {
		if got := normalize(slices.Clone(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: normalize(%v) = %v, want %v", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestIntervalsMatchBruteForce checks normalize, containsIntervals and AddSet against a
// per-number model on random small sets.
func TestIntervalsMatchBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	randIvs := func() ([]Interval, map[int64]bool) {
		var ivs []Interval
		in := map[int64]bool{}
		for range r.IntN(6) {
			lo := int64(1 + r.IntN(25))
			hi := lo + int64(1+r.IntN(4))
			ivs = append(ivs, Interval{lo, hi})
			for n := lo; n < hi; n++ {
				in[n] = true
			}
		}
		return ivs, in
	}
	oneSource := func(ivs []Interval) Set {
		s := Empty(MySQL)
		if len(ivs) > 0 {
			s.my[uuid.MustParse(u1)] = map[string][]Interval{"": ivs}
		}
		return s
	}
	for range 3000 {
		a, ain := randIvs()
		b, bin := randIvs()
		na, nb := normalize(slices.Clone(a)), normalize(slices.Clone(b))
		for i := range na {
			if na[i].Start >= na[i].Stop || (i > 0 && na[i].Start <= na[i-1].Stop) {
				t.Fatalf("normalize(%v) = %v: not sorted, merged and non-empty", a, na)
			}
		}
		var n int64
		for _, iv := range na {
			n += iv.Stop - iv.Start
		}
		if n != int64(len(ain)) {
			t.Fatalf("normalize(%v) = %v holds %d numbers, want %d", a, na, n, len(ain))
		}
		want := true
		for x := range bin {
			want = want && ain[x]
		}
		if got := containsIntervals(na, nb); got != want {
			t.Fatalf("containsIntervals(%v, %v) = %v, want %v", na, nb, got, want)
		}
		sa := oneSource(na)
		if err := sa.AddSet(oneSource(nb)); err != nil {
			t.Fatal(err)
		}
		union := Empty(MySQL)
		for x := range ain {
			_ = union.Add(fmt.Sprintf("%s:%d", u1, x))
		}
		for x := range bin {
			_ = union.Add(fmt.Sprintf("%s:%d", u1, x))
		}
		if !sa.Equal(union) || sa.String() != union.String() {
			t.Fatalf("%v + %v = %q, want %q", na, nb, sa, union)
		}
	}
}

// TestSetArithmeticEdges: the edges of the representation gtid keeps itself.
func TestSetArithmeticEdges(t *testing.T) {
	t.Run("adjacent across elements merge", func(t *testing.T) {
		s := mustParse(t, MySQL, u1+":1-3,"+u1+":4-6:t:1,"+u1+":t:2-3")
		if got, want := s.String(), u1+":1-6:t:1-3"; got != want {
			t.Fatalf("String() = %q, want %q", got, want)
		}
		if got := s.Sources(); len(got) != 2 || !slices.Equal(got[0].Intervals, []Interval{{1, 7}}) || got[1].Tag != "t" {
			t.Fatalf("Sources() = %v", got)
		}
	})
	t.Run("tags are lowercase sources, untagged first", func(t *testing.T) {
		s := mustParse(t, MySQL, u2+":Zed:1,"+u1+":B:1:A:2,"+u1+":3")
		var got []string
		for _, src := range s.Sources() {
			got = append(got, src.UUID.String()+"/"+src.Tag+fmt.Sprint(src.Intervals))
		}
		want := []string{u1 + "/[{3 4}]", u1 + "/a[{2 3}]", u1 + "/b[{1 2}]", u2 + "/zed[{1 2}]"}
		if !slices.Equal(got, want) {
			t.Fatalf("Sources() = %q, want %q", got, want)
		}
	})
	t.Run("Sources shares no storage", func(t *testing.T) {
		s := mustParse(t, MySQL, u1+":1-3")
		s.Sources()[0].Intervals[0].Stop = 99
		if s.String() != u1+":1-3" {
			t.Fatalf("changing Sources' result changed the set: %q", s)
		}
	})
	t.Run("emptied uuids and tags are pruned", func(t *testing.T) {
		s := mustParse(t, MySQL, u1+":1-3:t:5,"+u2+":1")
		d := s.Subtract(mustParse(t, MySQL, u1+":t:5,"+u2+":1-9"))
		if d.String() != u1+":1-3" || len(d.Sources()) != 1 || len(d.MissingSources(s)) != 2 {
			t.Fatalf("Subtract left %q, sources %v", d, d.Sources())
		}
		if !d.Equal(mustParse(t, MySQL, u1+":1-3")) {
			t.Fatal("a pruned difference is not Equal to its parsed text")
		}
		all := s.Subtract(s)
		if !all.IsEmpty() || all.Sources() != nil || all.String() != "" || !all.Equal(Empty(MySQL)) {
			t.Fatalf("s minus s = %q, sources %v", all, all.Sources())
		}
		if err := all.Add(u2 + ":4"); err != nil || all.String() != u2+":4" {
			t.Fatalf("Add after pruning: %v, %q", err, all)
		}
	})
	t.Run("several server ids in one MariaDB domain", func(t *testing.T) {
		b, err := ParseBinlogState("0-1-8,0-2-50,0-3-9,1-2-4")
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := b.Last(0, 3); !ok || n != 9 || b.MaxSeq(0) != 50 || b.MaxSeq(1) != 4 {
			t.Fatalf("Last(0,3) = %d, %v; MaxSeq = %d, %d", n, ok, b.MaxSeq(0), b.MaxSeq(1))
		}
		// A position holds one GTID per domain: the binlog state's second server id is not one.
		if _, err := Parse(MariaDB, "0-1-8,0-2-50"); err == nil {
			t.Fatal("a position with two GTIDs in one domain parsed")
		}
		s := mustParse(t, MariaDB, "0-1-8")
		if err := s.Add("0-2-50"); err != nil || s.String() != "0-2-50" {
			t.Fatalf("Add of another server id in the domain: %v, %q", err, s)
		}
	})
	t.Run("contain across domains", func(t *testing.T) {
		a := mustParse(t, MariaDB, "0-1-10,1-1-5,7-2-3")
		for _, c := range []struct {
			o    string
			want bool
		}{
			{"0-2-10,7-1-1", true},  // server ids do not matter to Contains, sequence numbers do
			{"0-1-10,1-1-6", false}, // behind in one domain
			{"0-1-1,2-1-1", false},  // a domain a lacks
			{"7-2-3,1-1-5,0-1-10", true},
			{"0-0-0", true},
		} {
			if got := a.Contains(mustParse(t, MariaDB, c.o)); got != c.want {
				t.Errorf("%q Contains %q = %v, want %v", a, c.o, got, c.want)
			}
		}
		if a.Equal(mustParse(t, MariaDB, "0-2-10,1-1-5,7-2-3")) {
			t.Error("positions with another server id compare Equal")
		}
		if a.Sources() != nil || mustParse(t, MySQL, u1+":1").Positions() != nil {
			t.Error("a flavor's accessor answers for the other flavor")
		}
	})
}
