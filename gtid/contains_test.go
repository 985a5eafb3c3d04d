package gtid

import "testing"

func TestContainsGTID(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	my, err := Parse(MySQL, u+":1-3:5:mytag:2-4")
	if err != nil {
		t.Fatal(err)
	}
	ma, err := Parse(MariaDB, "0-1-10,2-3-4")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		set  Set
		g    string
		want bool
	}{
		{my, u + ":1", true},
		{my, u + ":3", true},
		{my, u + ":4", false},
		{my, u + ":5", true},
		{my, u + ":6", false},
		{my, u + ":mytag:2", true},
		{my, u + ":mytag:5", false},
		{my, u + ":other:1", false},
		{my, "4e11fa47-71ca-11e1-9e33-c80aa9429562:1", false},
		{ma, "0-1-10", true},
		{ma, "0-1-9", false}, // not the position: whether it is covered is not a matter of numbers
		{ma, "0-2-10", false},
		{ma, "1-1-10", false},
	}
	for _, c := range cases {
		got, err := c.set.ContainsGTID(c.g)
		if err != nil || got != c.want {
			t.Errorf("%s ContainsGTID(%q) = %v, %v; want %v", c.set.Flavor(), c.g, got, err, c.want)
		}
	}
	for _, bad := range []string{"", u, u + ":x:y:1", "nope:1"} {
		if _, err := my.ContainsGTID(bad); err == nil {
			t.Errorf("mysql ContainsGTID(%q): want an error", bad)
		}
	}
	if _, err := ma.ContainsGTID("0-1"); err == nil {
		t.Error("mariadb ContainsGTID(0-1): want an error")
	}
	if _, err := (Set{}).ContainsGTID(u + ":1"); err == nil {
		t.Error("zero Set: want an error")
	}
}
