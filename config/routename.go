package config

import (
	"regexp"
	"strconv"
)

// Route labels outboxd itself gives series, which a route name must not take: the dead
// letters' route and the route of rows that matched none (or could not be routed).
const (
	RouteLabelDeadLetter = "dead_letter"
	RouteLabelNone       = "none"
)

// routeNameRe is the charset of a route name: a Prometheus label value may hold anything, but
// dashboards and alert rules quote route names in selectors and regexes, so a name is kept to
// characters that need no escaping there. It starts with a letter so it can never equal another
// route's index label.
var routeNameRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// Label returns the route label of the route at index i of Routes: its Name, or the index as
// text when it has none (so dashboards built on indexes keep working). Pure.
func (r Route) Label(i int) string {
	if r.Name != "" {
		return r.Name
	}
	return strconv.Itoa(i)
}

// RouteLabels returns the route label of every route, by index. Pure.
func (c *Config) RouteLabels() []string {
	out := make([]string, len(c.Routes))
	for i, r := range c.Routes {
		out[i] = r.Label(i)
	}
	return out
}

// validateRouteNames checks that route names are unique, in the safe charset, and none of the
// labels outboxd gives its own series.
func (c *Config) validateRouteNames(p *problems) {
	seen := map[string]int{}
	for i, r := range c.Routes {
		if r.Name == "" {
			continue
		}
		field := "routes[" + strconv.Itoa(i) + "].name"
		switch {
		case r.Name == RouteLabelDeadLetter || r.Name == RouteLabelNone:
			p.add(field, "%q is reserved (the route label of dead letters and of unrouted rows); choose another name", r.Name)
		case !routeNameRe.MatchString(r.Name):
			p.add(field, "%q is not a valid route name: use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter", r.Name)
		}
		if j, dup := seen[r.Name]; dup {
			p.add(field, "%q is also the name of routes[%d]; route names must be unique (they label the metrics)", r.Name, j)
			continue
		}
		seen[r.Name] = i
	}
}
