package gtid

import "testing"

// AddSet of a set built by Add in stream order gives what adding each GTID to s in that order
// gives: the tracker folds runs of transactions this way.
func TestAddSetEqualsAddingEach(t *testing.T) {
	cases := []struct {
		f           Flavor
		start, want string
		gtids       []string
	}{
		{MariaDB, "0-1-5,2-1-3", "0-2-9,1-1-1,2-1-3", []string{"0-1-6", "1-1-1", "0-2-9"}},
		{MariaDB, "", "0-1-2", []string{"0-1-1", "0-1-2"}},
		{MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-8:10:t:1,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:2",
			[]string{"3e11fa47-71ca-11e1-9e33-c80aa9429562:6", "3e11fa47-71ca-11e1-9e33-c80aa9429562:7", "3e11fa47-71ca-11e1-9e33-c80aa9429562:8",
				"3e11fa47-71ca-11e1-9e33-c80aa9429562:10", "3e11fa47-71ca-11e1-9e33-c80aa9429562:t:1", "4e11fa47-71ca-11e1-9e33-c80aa9429562:2"}},
	}
	for _, c := range cases {
		s, err := Parse(c.f, c.start)
		if err != nil {
			t.Fatal(err)
		}
		run := Empty(c.f)
		for _, g := range c.gtids {
			if err := run.Add(g); err != nil {
				t.Fatal(err)
			}
		}
		before := run.String()
		if err := s.AddSet(run); err != nil {
			t.Fatal(err)
		}
		if got := s.String(); got != c.want {
			t.Errorf("%s %q + %v = %q, want %q", c.f, c.start, c.gtids, got, c.want)
		}
		if run.String() != before {
			t.Errorf("AddSet changed its argument: %q, was %q", run.String(), before)
		}
	}
	m := Empty(MySQL)
	if err := m.AddSet(Empty(MariaDB)); err != nil {
		t.Errorf("adding an empty set: %v", err)
	}
	one, _ := Parse(MariaDB, "0-1-1")
	if err := m.AddSet(one); err == nil {
		t.Error("a MariaDB set added to a MySQL set")
	}
}
