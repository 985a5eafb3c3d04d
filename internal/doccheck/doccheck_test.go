package doccheck

import (
	"slices"
	"testing"
)

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Running two instances":       "running-two-instances",
		"server_id conflicts":         "server_id-conflicts",
		"OutboxdDown":                 "outboxddown",
		"`outboxd status` and health": "outboxd-status-and-health",
		"Coming from Debezium, Canal": "coming-from-debezium-canal",
		"A [link](x.md) in it":        "a-link-in-it",
		"Ünïcode and 2 spaces  here":  "ünïcode-and-2-spaces--here",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchorsAndLinks(t *testing.T) {
	page := "# Title\n\nSee [a](b.md#c) and `[not](x.md)`.\n\n```\n# not a heading [no](y.md)\n```\n\n## Title\n### Other ##\n![img](p.png)\n"
	if got, want := Anchors(page), []string{"title", "title-1", "other"}; !slices.Equal(got, want) {
		t.Errorf("Anchors = %q, want %q", got, want)
	}
	got := Links(page)
	want := []Link{{"b.md#c", 3}, {"p.png", 11}}
	if !slices.Equal(got, want) {
		t.Errorf("Links = %v, want %v", got, want)
	}
}
