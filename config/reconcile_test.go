package config

import (
	"strings"
	"testing"
	"time"
)

const reconcileBase = `
source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 7}
tables:
  - table: shop.outbox_event
%s
sinks: {main: {type: kafka, brokers: ["127.0.0.1:9092"]}}
routes: [{sink: main}]
%s
`

func TestReconcileConfig(t *testing.T) {
	cols := "    columns: {created_at: created_at}"
	c, err := parse([]byte(strings.Replace(strings.Replace(reconcileBase, "%s", cols, 1), "%s", "reconcile: {interval: 30m}", 1)), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Reconcile
	if r == nil || r.Interval != 30*time.Minute || r.Window != 30*time.Minute || r.Delay != DefaultReconcileDelay || r.Slack != DefaultReconcileSlack {
		t.Fatalf("defaults: %+v", r)
	}
	if c.Tables[0].Columns.CreatedAt != "created_at" {
		t.Fatalf("created_at: %q", c.Tables[0].Columns.CreatedAt)
	}
	off, err := parse([]byte(strings.Replace(strings.Replace(reconcileBase, "%s", "", 1), "%s", "", 1)), noEnv)
	if err != nil || off.Reconcile != nil || off.Tables[0].Columns.CreatedAt != "" {
		t.Fatalf("off by default: %v %+v", err, off)
	}
	for _, c := range []struct{ cols, rec, want string }{
		{"", "reconcile: {}", "tables[0].columns.created_at"},
		{cols, "reconcile: {interval: 1h, window: 30m}", "reconcile.window"},
		{cols, "reconcile: {interval: -1h}", "reconcile.interval"},
		{cols, "reconcile: {delay: -1m}", "reconcile.delay"},
		{cols, "reconcile: {slack: -1m}", "reconcile.slack"},
		{cols, "reconcile: {every: 1h}", "reconcile.every"},
		{"    columns: {created_at: \"a`b\"}", "", "tables[0].columns.created_at"},
	} {
		_, err := parse([]byte(strings.Replace(strings.Replace(reconcileBase, "%s", c.cols, 1), "%s", c.rec, 1)), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %q: error %v, want one naming %s", c.cols, c.rec, err, c.want)
		}
	}
}
