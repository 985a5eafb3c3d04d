package gtid

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const (
	u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	u2 = "57b70f4e-20c8-11ef-8d33-0242ac110002"
	u3 = "f0000000-0000-0000-0000-000000000001"
)

func mustParse(t testing.TB, f Flavor, s string) Set {
	t.Helper()
	set, err := Parse(f, s)
	if err != nil {
		t.Fatalf("Parse(%s, %q): %v", f, s, err)
	}
	return set
}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		name   string
		flavor Flavor
		in     string
		want   string
	}{
		{"mysql empty", MySQL, "", ""},
		{"mysql blank", MySQL, " \n\t", ""},
		{"mysql single", MySQL, u1 + ":1-5:7", u1 + ":1-5:7"},
		{"mysql intervals sorted", MySQL, u1 + ":7:1-5", u1 + ":1-5:7"},
		{"mysql adjacent merged", MySQL, u1 + ":1-3:4-5", u1 + ":1-5"},
		{"mysql overlapping merged", MySQL, u1 + ":1-5:3-8:2", u1 + ":1-8"},
		{"mysql one-element range", MySQL, u1 + ":5-5", u1 + ":5"},
		{"mysql uuids sorted, newline separator", MySQL, u2 + ":1-3," + u1 + ":5", u1 + ":5,\n" + u2 + ":1-3"},
		{"mysql as gtid_executed prints", MySQL, u1 + ":1-3,\n" + u2 + ":5", u1 + ":1-3,\n" + u2 + ":5"},
		{"mysql whitespace everywhere", MySQL, "  " + u1 + " : 1 - 3 ,\n  " + u2 + ":5\n", u1 + ":1-3,\n" + u2 + ":5"},
		{"mysql uppercase uuid", MySQL, strings.ToUpper(u1) + ":1", u1 + ":1"},
		{"mysql uuid without dashes", MySQL, strings.ReplaceAll(u1, "-", "") + ":1", u1 + ":1"},
		{"mysql braced uuid", MySQL, "{" + u1 + "}:1", u1 + ":1"},
		{"mysql same uuid twice merges", MySQL, u1 + ":1-3," + u1 + ":4", u1 + ":1-4"},
		{"mysql tagged after untagged", MySQL, u1 + ":1-13:mytag:1-2", u1 + ":1-13:mytag:1-2"},
		{"mysql tag only", MySQL, u1 + ":mytag:3", u1 + ":mytag:3"},
		{"mysql tag applies to following intervals", MySQL, u1 + ":mytag:1-2:3-13", u1 + ":mytag:1-13"},
		{"mysql tag lowercased", MySQL, u1 + ":MyTag:3", u1 + ":mytag:3"},
		{"mysql tags sorted, untagged first", MySQL, u1 + ":b:1," + u1 + ":a:2," + u1 + ":5", u1 + ":5:a:2:b:1"},
		{"mysql tag with underscore and digits", MySQL, u1 + ":_t9:1", u1 + ":_t9:1"},
		{"mysql 32-char tag", MySQL, u1 + ":" + strings.Repeat("a", 32) + ":1", u1 + ":" + strings.Repeat("a", 32) + ":1"},
		{"mysql largest gno", MySQL, u1 + ":9223372036854775806", u1 + ":9223372036854775806"},
		{"mysql tagged multi uuid", MySQL, u2 + ":x:1," + u1 + ":1-2:x:4", u1 + ":1-2:x:4,\n" + u2 + ":x:1"},

		{"mariadb empty", MariaDB, "", ""},
		{"mariadb two domains", MariaDB, "0-1-42,1-2-7", "0-1-42,1-2-7"},
		{"mariadb numeric domain order", MariaDB, "10-1-5,2-1-7", "2-1-7,10-1-5"},
		{"mariadb numeric domain order, many", MariaDB, "100-1-1,20-1-1,3-1-1,0-1-1", "0-1-1,3-1-1,20-1-1,100-1-1"},
		{"mariadb whitespace", MariaDB, " 1-2-3 ,\n 0-1-1", "0-1-1,1-2-3"},
		{"mariadb zero position", MariaDB, "0-0-0", "0-0-0"},
		{"mariadb maxima", MariaDB, "4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.flavor, tt.in)
			if got := s.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			if s.Flavor() != tt.flavor {
				t.Fatalf("Flavor() = %q, want %q", s.Flavor(), tt.flavor)
			}
			again := mustParse(t, tt.flavor, tt.want)
			if !again.Equal(s) || again.String() != tt.want {
				t.Fatalf("round trip of %q gave %q", tt.want, again.String())
			}
			if s.IsEmpty() != (tt.want == "") {
				t.Fatalf("IsEmpty() = %v for %q", s.IsEmpty(), tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		flavor Flavor
		in     string
		want   string // substring naming the bad part
	}{
		{"unknown flavor", Flavor("postgres"), "", `unknown flavor "postgres"`},
		{"mysql bad uuid", MySQL, "nope:1", `bad uuid "nope"`},
		{"mysql short uuid", MySQL, "3e11fa47-71ca-11e1-9e33:1", `bad uuid "3e11fa47-71ca-11e1-9e33"`},
		{"mysql uuid alone", MySQL, u1, "has no interval"},
		{"mysql trailing colon", MySQL, u1 + ":1:", "empty field between colons"},
		{"mysql zero gno", MySQL, u1 + ":0", `bad transaction number "0"`},
		{"mysql reversed range", MySQL, u1 + ":5-3", `interval "5-3": end 3 is below start 5`},
		{"mysql bad range end", MySQL, u1 + ":1-x", `bad transaction number "x"`},
		{"mysql signed gno", MySQL, u1 + ":+5", `bad transaction number "+5"`},
		{"mysql negative", MySQL, u1 + ":-5", `interval "-5"`},
		{"mysql too many dashes", MySQL, u1 + ":1-2-3", `bad transaction number "2-3"`},
		{"mysql gno too large", MySQL, u1 + ":9223372036854775807", `bad transaction number "9223372036854775807"`},
		{"mysql gno overflow", MySQL, u1 + ":99999999999999999999", `bad transaction number "99999999999999999999"`},
		{"mysql tag without interval", MySQL, u1 + ":1:tag", `tag "tag" has no interval`},
		{"mysql two tags in a row", MySQL, u1 + ":t1:t2:1", `tag "t1" has no interval`},
		{"mysql tag too long", MySQL, u1 + ":" + strings.Repeat("a", 33) + ":1", "bad tag"},
		{"mysql tag bad char", MySQL, u1 + ":t-x:1", `bad tag "t-x"`},
		{"mysql empty element", MySQL, u1 + ":1,,", "empty element between commas"},
		{"mysql hex gno", MySQL, u1 + ":0x10", `bad transaction number "0x10"`},

		{"mariadb two fields", MariaDB, "0-1", `element "0-1": want domain-server-sequence`},
		{"mariadb four fields", MariaDB, "0-1-2-3", `element "0-1-2-3"`},
		{"mariadb bad domain", MariaDB, "a-1-2", `bad domain id "a"`},
		{"mariadb bad server", MariaDB, "0--1-2", `element "0--1-2"`},
		{"mariadb bad sequence", MariaDB, "0-1-x", `bad sequence number "x"`},
		{"mariadb signed", MariaDB, "0-1-+2", `bad sequence number "+2"`},
		{"mariadb domain too large", MariaDB, "4294967296-1-1", `bad domain id "4294967296"`},
		{"mariadb server too large", MariaDB, "0-4294967296-1", `bad server id "4294967296"`},
		{"mariadb duplicate domain", MariaDB, "0-1-5,0-2-6", "domain 0 already has position 0-1-5"},
		{"mariadb trailing comma", MariaDB, "0-1-5,", "empty element between commas"},
		{"mariadb mysql notation", MariaDB, u1 + ":1", "want domain-server-sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.flavor, tt.in)
			if err == nil {
				t.Fatalf("Parse(%s, %q) = %q, want error", tt.flavor, tt.in, s)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestAdd(t *testing.T) {
	tests := []struct {
		name   string
		flavor Flavor
		start  string
		adds   []string
		want   string
	}{
		{"mysql consecutive merge", MySQL, "", []string{u1 + ":1", u1 + ":2", u1 + ":3"}, u1 + ":1-3"},
		{"mysql gap then fill", MySQL, u1 + ":1-3", []string{u1 + ":5", u1 + ":4"}, u1 + ":1-5"},
		{"mysql gap stays", MySQL, u1 + ":1-3", []string{u1 + ":5"}, u1 + ":1-3:5"},
		{"mysql duplicate is no-op", MySQL, u1 + ":1-3", []string{u1 + ":2"}, u1 + ":1-3"},
		{"mysql prepend adjacent", MySQL, u1 + ":2-3", []string{u1 + ":1"}, u1 + ":1-3"},
		{"mysql tagged", MySQL, u1 + ":1-13", []string{u1 + ":mytag:1", u1 + ":MyTag:2"}, u1 + ":1-13:mytag:1-2"},
		{"mysql new uuid", MySQL, u2 + ":1", []string{u1 + ":7"}, u1 + ":7,\n" + u2 + ":1"},
		{"mariadb advance", MariaDB, "", []string{"0-1-1", "0-1-2"}, "0-1-2"},
		{"mariadb domains numeric", MariaDB, "0-1-2", []string{"10-1-1", "2-1-1"}, "0-1-2,2-1-1,10-1-1"},
		{"mariadb failover replaces", MariaDB, "0-1-9,1-1-3", []string{"0-2-10"}, "0-2-10,1-1-3"},
		{"mariadb replaces even if lower", MariaDB, "0-1-9", []string{"0-1-5"}, "0-1-5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.flavor, tt.start)
			for _, g := range tt.adds {
				if err := s.Add(g); err != nil {
					t.Fatalf("Add(%q): %v", g, err)
				}
			}
			if got := s.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAddErrors(t *testing.T) {
	tests := []struct {
		flavor Flavor
		gtid   string
		want   string
	}{
		{MySQL, u1, "want uuid:N or uuid:tag:N"},
		{MySQL, u1 + ":1-3", `bad transaction number "1-3"`},
		{MySQL, u1 + ":0", `bad transaction number "0"`},
		{MySQL, u1 + ":t:x:1", "want uuid:N or uuid:tag:N"},
		{MySQL, u1 + ":9x:1", `bad tag "9x"`},
		{MySQL, "zz:1", `bad uuid "zz"`},
		{MySQL, "0-1-2", "want uuid:N or uuid:tag:N"},
		{MariaDB, "0-1", "want domain-server-sequence"},
		{MariaDB, "0-1-2,1-1-1", "want domain-server-sequence"},
		{MariaDB, u1 + ":1", "want domain-server-sequence"},
	}
	for _, tt := range tests {
		t.Run(string(tt.flavor)+" "+tt.gtid, func(t *testing.T) {
			start := map[Flavor]string{MySQL: u1 + ":1-2", MariaDB: "0-1-1"}[tt.flavor]
			s := mustParse(t, tt.flavor, start)
			err := s.Add(tt.gtid)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Add(%q) error = %v, want containing %q", tt.gtid, err, tt.want)
			}
			if s.String() != start {
				t.Fatalf("set changed on error: %q", s.String())
			}
		})
	}
	var zero Set
	if err := zero.Add(u1 + ":1"); err == nil || !strings.Contains(err.Error(), "uninitialised") {
		t.Fatalf("Add on zero Set: %v", err)
	}
	bogus := Empty("bogus")
	if err := bogus.Add("0-1-1"); err == nil {
		t.Fatal("Add on a set of unknown flavor succeeded")
	}
}

func TestContainsEqual(t *testing.T) {
	tests := []struct {
		name         string
		flavor       Flavor
		a, b         string
		aHasB, bHasA bool
		equal        bool
	}{
		{"mysql same", MySQL, u1 + ":1-5", u1 + ":1-3:4-5", true, true, true},
		{"mysql superset", MySQL, u1 + ":1-5," + u2 + ":1", u1 + ":2-4", true, false, false},
		{"mysql adjacent not contained", MySQL, u1 + ":1-3", u1 + ":4", false, false, false},
		{"mysql gap", MySQL, u1 + ":1-3:5-7", u1 + ":3-5", false, false, false},
		{"mysql other uuid", MySQL, u1 + ":1-5", u2 + ":1", false, false, false},
		{"mysql tag is a separate source", MySQL, u1 + ":1-5", u1 + ":t:1", false, false, false},
		{"mysql tagged contained", MySQL, u1 + ":1-5:t:1-3", u1 + ":t:2", true, false, false},
		{"mysql empty", MySQL, u1 + ":1", "", true, false, false},
		{"mysql both empty", MySQL, "", "", true, true, true},
		{"mariadb same", MariaDB, "0-1-5,1-1-2", "1-1-2,0-1-5", true, true, true},
		{"mariadb ahead", MariaDB, "0-1-5,1-1-2", "0-1-4", true, false, false},
		{"mariadb missing domain", MariaDB, "0-1-5", "0-1-6,1-1-1", false, true, false},
		{"mariadb same seq other server", MariaDB, "0-1-5", "0-2-5", true, true, false},
		{"mariadb empty", MariaDB, "0-1-5", "", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := mustParse(t, tt.flavor, tt.a), mustParse(t, tt.flavor, tt.b)
			if got := a.Contains(b); got != tt.aHasB {
				t.Errorf("a.Contains(b) = %v", got)
			}
			if got := b.Contains(a); got != tt.bHasA {
				t.Errorf("b.Contains(a) = %v", got)
			}
			if got := a.Equal(b); got != tt.equal {
				t.Errorf("a.Equal(b) = %v", got)
			}
			if got := b.Equal(a); got != tt.equal {
				t.Errorf("b.Equal(a) = %v", got)
			}
		})
	}
}

func TestCrossFlavor(t *testing.T) {
	my := mustParse(t, MySQL, u1+":1")
	ma := mustParse(t, MariaDB, "0-1-1")
	if my.Contains(ma) || ma.Contains(my) || my.Equal(ma) {
		t.Fatal("sets of different flavors compare as related")
	}
	if !my.Contains(Empty(MariaDB)) || !Empty(MySQL).Equal(Empty(MariaDB)) {
		t.Fatal("empty sets of another flavor should be contained and equal")
	}
	if got := my.MissingSources(ma); !slices.Equal(got, []string{"0"}) {
		t.Fatalf("MissingSources across flavors = %q", got)
	}
	if got := my.Subtract(ma); !got.Equal(my) {
		t.Fatalf("Subtract across flavors = %q", got)
	}
	var zero Set
	if !zero.IsEmpty() || zero.String() != "" || zero.Contains(my) || !my.Contains(zero) {
		t.Fatal("zero Set does not behave as an empty set")
	}
}

func TestMissingSources(t *testing.T) {
	tests := []struct {
		name     string
		flavor   Flavor
		s, other string
		want     []string
	}{
		{"mysql none", MySQL, u1 + ":1-5", u1 + ":7", nil},
		{"mysql uuid", MySQL, u1 + ":1-5", u1 + ":1," + u2 + ":3", []string{u2}},
		{"mysql tag", MySQL, u1 + ":1-5", u1 + ":1:t:1-2", []string{u1 + ":t"}},
		{"mysql untagged missing", MySQL, u1 + ":t:1", u1 + ":1:t:1", []string{u1}},
		{"mysql from empty, in order", MySQL, "", u3 + ":1," + u1 + ":b:1:a:1," + u2 + ":1",
			[]string{u1 + ":a", u1 + ":b", u2, u3}},
		{"mariadb none", MariaDB, "0-1-5,1-1-1", "0-1-9", nil},
		{"mariadb domains numeric", MariaDB, "0-1-5", "0-1-5,10-1-1,2-1-1", []string{"2", "10"}},
		{"mariadb other empty", MariaDB, "0-1-5", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, tt.flavor, tt.s).MissingSources(mustParse(t, tt.flavor, tt.other))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("MissingSources = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSubtract(t *testing.T) {
	tests := []struct {
		name   string
		flavor Flavor
		s, o   string
		want   string
	}{
		{"mysql middle", MySQL, u1 + ":1-10", u1 + ":4-6", u1 + ":1-3:7-10"},
		{"mysql all", MySQL, u1 + ":1-10", u1 + ":1-20", ""},
		{"mysql edges", MySQL, u1 + ":1-10", u1 + ":1:10", u1 + ":2-9"},
		{"mysql spanning several", MySQL, u1 + ":1-3:5-7:9-11", u1 + ":2-10", u1 + ":1:11"},
		{"mysql other uuid untouched", MySQL, u1 + ":1-3," + u2 + ":1-3", u2 + ":1-3", u1 + ":1-3"},
		{"mysql tags separate", MySQL, u1 + ":1-3:t:1-3", u1 + ":2", u1 + ":1:3:t:1-3"},
		{"mysql empty o", MySQL, u1 + ":1-3", "", u1 + ":1-3"},
		{"mariadb behind or missing", MariaDB, "0-1-5,1-1-5,2-1-5", "0-1-5,1-1-4", "1-1-5,2-1-5"},
		{"mariadb ahead drops", MariaDB, "0-1-5", "0-2-9", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, o := mustParse(t, tt.flavor, tt.s), mustParse(t, tt.flavor, tt.o)
			before := s.String()
			got := s.Subtract(o)
			if got.String() != tt.want {
				t.Fatalf("Subtract = %q, want %q", got.String(), tt.want)
			}
			if s.String() != before {
				t.Fatalf("Subtract modified its receiver: %q", s.String())
			}
			if !got.Equal(mustParse(t, tt.flavor, tt.want)) {
				t.Fatalf("result not Equal to its parsed form (stale empty entries?)")
			}
		})
	}
}

// TestSubtractMatchesBruteForce compares interval subtraction with a per-number model on random
// small sets.
func TestSubtractMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randSet := func() (Set, map[int64]bool) {
		s, in := Empty(MySQL), map[int64]bool{}
		for range r.IntN(15) {
			n := int64(1 + r.IntN(30))
			in[n] = true
			if err := s.Add(fmt.Sprintf("%s:%d", u1, n)); err != nil {
				t.Fatal(err)
			}
		}
		return s, in
	}
	for range 2000 {
		a, ain := randSet()
		b, bin := randSet()
		d := a.Subtract(b)
		want := Empty(MySQL)
		for n := range ain {
			if !bin[n] {
				_ = want.Add(fmt.Sprintf("%s:%d", u1, n))
			}
		}
		if !d.Equal(want) {
			t.Fatalf("%q minus %q = %q, want %q", a, b, d, want)
		}
		if !a.Contains(d) || (!d.IsEmpty() && b.Contains(d)) {
			t.Fatalf("containment broken for %q minus %q = %q", a, b, d)
		}
	}
}

func TestCloneIndependent(t *testing.T) {
	for _, tc := range []struct {
		f          Flavor
		start, add string
	}{{MySQL, u1 + ":1-3", u1 + ":9"}, {MariaDB, "0-1-3", "0-1-9"}} {
		s := mustParse(t, tc.f, tc.start)
		c := s.Clone()
		if err := c.Add(tc.add); err != nil {
			t.Fatal(err)
		}
		if s.String() != tc.start || c.String() == tc.start {
			t.Fatalf("%s: clone shares storage: s=%q c=%q", tc.f, s, c)
		}
	}
}

func TestFlavorValidate(t *testing.T) {
	if MySQL.Validate() != nil || MariaDB.Validate() != nil {
		t.Fatal("known flavors rejected")
	}
	if err := Flavor("MySQL").Validate(); err == nil || !strings.Contains(err.Error(), `"MySQL"`) {
		t.Fatalf("Validate(MySQL) = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(false, u1+":1-5:7")
	f.Add(false, u1+":1-3,\n"+u2+":5")
	f.Add(false, u1+":1-13:mytag:1-2")
	f.Add(true, "0-1-42,1-2-7")
	f.Add(true, "10-1-5,2-1-7")
	f.Fuzz(func(t *testing.T, mariadb bool, in string) {
		fl := MySQL
		if mariadb {
			fl = MariaDB
		}
		s, err := Parse(fl, in)
		if err != nil {
			return
		}
		out := s.String()
		again, err := Parse(fl, out)
		if err != nil {
			t.Fatalf("Parse(%q) ok but its String %q does not parse: %v", in, out, err)
		}
		if !again.Equal(s) || !s.Equal(again) {
			t.Fatalf("Parse(%q).String() = %q parses to a different set %q", in, out, again)
		}
		if again.String() != out {
			t.Fatalf("String not stable: %q then %q", out, again.String())
		}
		if !s.Contains(again) || !s.Subtract(again).IsEmpty() {
			t.Fatalf("set %q does not contain its own round trip", out)
		}
		if len(s.MissingSources(again)) != 0 {
			t.Fatalf("round trip of %q lost sources", out)
		}
	})
}
