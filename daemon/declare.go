package daemon

import (
	"path"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
)

// declareTables creates every configured table's series at 0: rows read, and deliveries and
// dead letters on each route whose table glob matches it (its topic glob cannot be known
// before a row arrives, so a route is declared for every table its table glob takes) plus the
// dead letters' route when dead letters are on. Bounded by the config: tables × routes.
func declareTables(m *metrics.Metrics, cfg *config.Config) {
	dead := cfg.DeadLetter != nil && cfg.OnPoison == pipeline.PoisonDeadLetter
	for _, t := range cfg.Tables {
		if t.IsPattern() {
			continue // its tables' series appear with their first rows
		}
		var routes []string
		for i, r := range cfg.Routes {
			if r.Match.Table == "" {
				routes = append(routes, r.Label(i))
				continue
			}
			if ok, err := path.Match(r.Match.Table, t.Table); err == nil && ok {
				routes = append(routes, r.Label(i))
			}
		}
		if dead {
			routes = append(routes, metrics.RouteDeadLetter)
		}
		m.DeclareTable(t.Table, routes)
	}
}
