package daemon

import (
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/metrics"
)

// The labels config reserves are the ones the metrics give dead letters and unrouted rows, so a
// route name can never share a series with them.
func TestReservedRouteLabelsAgree(t *testing.T) {
	if config.RouteLabelDeadLetter != metrics.RouteDeadLetter || config.RouteLabelNone != metrics.RouteNone {
		t.Errorf("config reserves %q and %q; metrics uses %q and %q",
			config.RouteLabelDeadLetter, config.RouteLabelNone, metrics.RouteDeadLetter, metrics.RouteNone)
	}
}
