package config

import (
	"strings"
	"testing"
	"time"
)

func TestCleanupOffByDefault(t *testing.T) {
	c, err := parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.CleanupFor(0); ok {
		t.Fatal("cleanup on without a cleanup block")
	}
	if on, _ := c.CleanupAny(); on {
		t.Fatal("CleanupAny without a block")
	}
}

func TestCleanupGlobalAndTableOverride(t *testing.T) {
	y := strings.Replace(minimal, "  - table: shop.outbox_event\n", `  - table: shop.outbox_event
    columns: {created_at: created_at}
  - table: shop.outbox_b
    cleanup: {retention: 0s, batch: 50}
  - table: shop.outbox_c
    cleanup: {enabled: false}
cleanup: {retention: 168h, max_rows_per_second: 200, interval: 30s, commit_margin: 2m, hold_table: ops.hold, time_zone: "-08:00"}
`, 1)
	c, err := parse([]byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := c.CleanupFor(0)
	want := CleanupSettings{Retention: 168 * time.Hour, Batch: DefaultCleanupBatch, MaxRowsPerSecond: 200, Interval: 30 * time.Second,
		CommitMargin: 2 * time.Minute, CreatedAt: "created_at", TimeZone: "-08:00"}
	if !ok || a != want {
		t.Errorf("table 0: %+v %v, want %+v", a, ok, want)
	}
	b, ok := c.CleanupFor(1)
	if !ok || b.Retention != 0 || b.Batch != 50 || b.MaxRowsPerSecond != 200 || b.Sweeps() {
		t.Errorf("table 1 (override): %+v %v", b, ok)
	}
	if _, ok := c.CleanupFor(2); ok {
		t.Error("table 2: enabled: false still cleaned")
	}
	if on, sweeps := c.CleanupAny(); !on || !sweeps {
		t.Errorf("CleanupAny = %v, %v", on, sweeps)
	}
}

func TestCleanupDefaults(t *testing.T) {
	y := strings.Replace(minimal, "  - table: shop.outbox_event\n", "  - table: shop.outbox_event\n    columns: {created_at: created_at}\n    cleanup: {}\n", 1)
	c, err := parse([]byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.CleanupFor(0)
	want := CleanupSettings{Retention: 168 * time.Hour, Batch: 1000, MaxRowsPerSecond: 5000, Interval: time.Minute,
		CommitMargin: 5 * time.Minute, CreatedAt: "created_at"}
	if !ok || s != want {
		t.Errorf("%+v, want %+v", s, want)
	}
}

func TestCleanupInvalid(t *testing.T) {
	for _, tc := range []struct{ block, want string }{
		{"cleanup: {retention: -1h}", "cleanup.retention (line"},
		{"cleanup: {batch: 20000}", "cleanup.batch (line"},
		{"cleanup: {batch: -1}", "must be 1 to 10000"},
		{"cleanup: {max_rows_per_second: -5}", "cleanup.max_rows_per_second"},
		{"cleanup: {interval: 10ms}", "cleanup.interval"},
		{"cleanup: {commit_margin: 1ms}", "cleanup.commit_margin"},
		{"cleanup: {time_zone: \"+8\"}", "cleanup.time_zone (line"},
		{"cleanup: {time_zone: \"UTC; DROP\"}", "an offset such as +00:00"},
		{"cleanup: {retension: 1h}", `unknown field "retension"`},
		{"cleanup: {retention: soon}", "a duration"},
		{"cleanup: {batch: many}", "want an integer"},
		{"cleanup: {retention: 1h}", "tables[0].columns.created_at (line 8): is required with cleanup.retention 1h0m0s"},
	} {
		wantContains(t, mustFail(t, minimal+tc.block+"\n", noEnv), tc.want)
	}
	y := strings.Replace(minimal, "  - table: shop.outbox_event\n", "  - table: shop.outbox_event\n    cleanup: {retention: 0s, hold_table: a.b}\n", 1)
	wantContains(t, mustFail(t, y, noEnv), "tables[0].cleanup.hold_table", "global cleanup block only")
	y = strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addrs: [\"a:1\", \"b:2\"]\n", 1)
	wantContains(t, mustFail(t, y+"cleanup: {retention: 0s}\n", noEnv), "cleanup (line 13): deletes on the writable primary")
	for _, tz := range []string{"SYSTEM", "+00:00", "-08:00", "Europe/Berlin", "UTC"} {
		if _, err := parse([]byte(minimal+"cleanup: {retention: 0s, time_zone: \""+tz+"\"}\n"), noEnv); err != nil {
			t.Errorf("time_zone %s: %v", tz, err)
		}
	}
	// retention 0 needs no created_at; a table's enabled: false silences the global block.
	if _, err := parse([]byte(minimal+"cleanup: {retention: 0s}\n"), noEnv); err != nil {
		t.Errorf("retention 0 without created_at: %v", err)
	}
	y = strings.Replace(minimal, "  - table: shop.outbox_event\n", "  - table: shop.outbox_event\n    cleanup: {enabled: false}\n", 1)
	if _, err := parse([]byte(y+"cleanup: {retention: 1h}\n"), noEnv); err != nil {
		t.Errorf("retention 1h on a table with enabled: false: %v", err)
	}
}
