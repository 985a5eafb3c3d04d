package config

import (
	"slices"
	"strings"
	"testing"
)

const twoRoutes = minimal + `  - sink: main
    match: {table: "shop.*"}
`

// A route's name is its metrics label; without one the label stays its index.
func TestRouteNameLabels(t *testing.T) {
	c, err := parse([]byte(strings.Replace(twoRoutes, "  - sink: main\n", "  - name: orders-v2.eu\n    sink: main\n", 1)), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RouteLabels(); !slices.Equal(got, []string{"orders-v2.eu", "1"}) {
		t.Errorf("route labels %v, want [orders-v2.eu 1]", got)
	}
	c, err = parse([]byte(twoRoutes), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RouteLabels(); !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("route labels without names %v, want the indexes", got)
	}
}

// Names must be unique, in the safe charset, and not the labels outboxd uses itself.
func TestRouteNameValidation(t *testing.T) {
	named := func(a, b string) string {
		y := strings.Replace(twoRoutes, "  - sink: main\n", "  - name: "+a+"\n    sink: main\n", 1)
		return strings.Replace(y, "  - sink: main\n    match:", "  - name: "+b+"\n    sink: main\n    match:", 1)
	}
	for _, tc := range []struct {
		y     string
		wants []string
	}{
		{named("orders", "orders"), []string{"routes[1].name", `"orders" is also the name of routes[0]`}},
		{named("dead_letter", "ok"), []string{"routes[0].name", "reserved"}},
		{named("ok", "none"), []string{"routes[1].name", "reserved"}},
		{named(`"7"`, "ok"), []string{"routes[0].name", "starting with a letter"}},
		{named(`"a b"`, "ok"), []string{"routes[0].name", "not a valid route name"}},
		{named(`"a\"b"`, "ok"), []string{"routes[0].name", "not a valid route name"}},
		{named("x"+strings.Repeat("y", 64), "ok"), []string{"routes[0].name", "1 to 64"}},
	} {
		wantContains(t, mustFail(t, tc.y, noEnv), tc.wants...)
	}
	// The longest allowed name and every allowed character.
	if _, err := parse([]byte(named("x"+strings.Repeat("y", 63), "A_b.c-9")), noEnv); err != nil {
		t.Errorf("valid names refused: %v", err)
	}
}
