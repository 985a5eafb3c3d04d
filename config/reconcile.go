package config

import (
	"fmt"
	"time"
)

// Reconcile is the optional periodic reconciliation inside the daemon (outboxd reconcile on a
// timer, by the leader): every Interval it checks the rows created in the last Window before
// the database's NOW()-Delay, and from the durable mark kept with the checkpoint when that is
// earlier, against the brokers and sets outboxd_reconcile_missing_events. Nil (the default)
// turns it off.
type Reconcile struct {
	// Interval is the time between two runs; default DefaultReconcileInterval.
	Interval time.Duration `yaml:"interval"`
	// Window is how much created_at time each run checks, and the widest window a run behind
	// its mark checks at once; default Interval (back to back windows). It must not be shorter
	// than Interval.
	Window time.Duration `yaml:"window"`
	// Delay keeps the window this far behind now, so rows still in flight (the relay's lag)
	// are not reported missing; default DefaultReconcileDelay (0 takes the default).
	Delay time.Duration `yaml:"delay"`
	// Slack widens the broker read on each side of the window (see outboxd reconcile --slack);
	// default DefaultReconcileSlack.
	Slack time.Duration `yaml:"slack"`
	// Out, when set, is a file the last run's JSON report (the missing and duplicated event
	// ids) is written to, replaced at each run.
	Out string `yaml:"out"`
}

// Defaults of the reconcile section.
const (
	DefaultReconcileInterval = time.Hour
	DefaultReconcileDelay    = 5 * time.Minute
	DefaultReconcileSlack    = 5 * time.Minute
)

func (r *Reconcile) applyDefaults() {
	if r == nil {
		return
	}
	setDefaultDur(&r.Interval, DefaultReconcileInterval)
	setDefaultDur(&r.Window, r.Interval)
	setDefaultDur(&r.Delay, DefaultReconcileDelay)
	setDefaultDur(&r.Slack, DefaultReconcileSlack)
}

func (c *Config) validateReconcile(p *problems) {
	r := c.Reconcile
	if r == nil {
		return
	}
	if r.Interval <= 0 {
		p.add("reconcile.interval", "must be positive, such as 1h; got %s", r.Interval)
	}
	if r.Window < r.Interval {
		p.add("reconcile.window", "must be at least reconcile.interval (%s), or rows created between two windows are never checked; got %s", r.Interval, r.Window)
	}
	if r.Delay < 0 {
		p.add("reconcile.delay", "must not be negative; got %s", r.Delay)
	}
	if r.Slack < 0 {
		p.add("reconcile.slack", "must not be negative; got %s", r.Slack)
	}
	for i, t := range c.Tables {
		if t.Columns.CreatedAt == "" {
			p.add(fmt.Sprintf("tables[%d].columns.created_at", i), "is required with reconcile: name the table's DATETIME or TIMESTAMP insert-time column, which selects each run's window")
		}
	}
}
