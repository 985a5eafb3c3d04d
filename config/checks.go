package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/servercheck"
)

// validateSkipChecks accepts only the names of checks outboxd has: a misspelled name would
// otherwise skip nothing while the operator believes the override is in place.
func (c *Config) validateSkipChecks(p *problems) {
	names := servercheck.Names()
	seen := map[string]bool{}
	for i, name := range c.Source.SkipChecks {
		field := fmt.Sprintf("source.skip_checks[%d]", i)
		switch {
		case !slices.Contains(names, name):
			p.add(field, "%q is not a check name; use one of %s", name, strings.Join(names, ", "))
		case seen[name]:
			p.add(field, "%q is listed twice; keep one", name)
		}
		seen[name] = true
	}
}
