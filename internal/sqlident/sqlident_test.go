package sqlident

import "testing"

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"outbox_event": "`outbox_event`",
		"a`b":          "`a``b`",
		"``":           "``````",
		"":             "``",
		"a.b":          "`a.b`", // a dot is part of the name, not a qualifier
		"läden":        "`läden`",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := Table("sh`op", "outbox"); got != "`sh``op`.`outbox`" {
		t.Errorf("Table = %s", got)
	}
}
