package config

import (
	"strings"
	"testing"
	"time"
)

func TestHADefaultsAndDerived(t *testing.T) {
	c, err := parse([]byte(minimal+"checkpoint: {store: mysql, name: orders}\nha: {enabled: true}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultLockName("orders", c.ScopeTables())
	if c.HA.Lease != DefaultHALease || c.HA.LockName != want || c.LockName() != want || !strings.HasPrefix(want, "outboxd.orders.") {
		t.Fatalf("ha %+v", c.HA)
	}
	if got := c.LongestSend(); got != DefaultKafkaTimeout {
		t.Fatalf("longest send %s, want the kafka timeout %s", got, DefaultKafkaTimeout)
	}
	c, err = parse([]byte(minimal+"checkpoint: {store: mysql, name: orders}\nha: {enabled: true, lock_name: relay-lock, lease: 3s}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.HA.Lease != 3*time.Second || c.LockName() != "relay-lock" {
		t.Fatalf("ha %+v", c.HA)
	}
	// Without ha the lock name commands check still follows checkpoint.name and the tables.
	c, err = parse([]byte(minimal+"checkpoint: {store: mysql, name: orders}\n"), noEnv)
	if err != nil || c.LockName() != want || c.HA.LockName != "" {
		t.Fatalf("no ha: %v %+v", err, c.HA)
	}
}

func TestHAValidation(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"ha: {enabled: true}", "ha.enabled (line 13): needs checkpoint.store: mysql: a checkpoint file lives on one machine's disk"},
		{"checkpoint: {store: mysql, name: orders}\nha: {enabled: true, lease: 500ms}", "ha.lease (line 14): must be at least 1s"},
		{"checkpoint: {store: mysql, name: orders}\nha: {enabled: true, lock_name: " + strings.Repeat("n", 65) + "}", "ha.lock_name"},
		{"checkpoint: {store: mysql, name: orders}\nha: {lease: 3s}", "ha.lease (line 14): is only for ha.enabled: true"},
		{"checkpoint: {store: mysql, name: orders}\nha: {enabled: true, lockname: x}", "lockname"},
	} {
		got := mustFail(t, minimal+c.yaml+"\n", noEnv)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.yaml, got, c.want)
		}
	}
}

func TestSourceAddrs(t *testing.T) {
	one := strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"10.0.0.2:3306\"]\n  on_missing_gtids: continue\n", 1)
	c, err := parse([]byte(one), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Addr != "10.0.0.1:3306" || len(c.Source.Addrs) != 2 || c.Source.OnMissingGTIDs != OnMissingContinue {
		t.Fatalf("source %+v", c.Source)
	}
	if c.Checkpoint.Path == "" {
		t.Fatal("defaults not applied")
	}
	for _, tc := range []struct{ yaml, want string }{
		{strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addr: 127.0.0.1:3306\n  addrs: [\"10.0.0.1:3306\"]\n", 1), "source.addrs (line 5): and source.addr are both set"},
		{strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"nope\"]\n", 1), "source.addrs[1]"},
		{strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"10.0.0.1:3306\"]\n", 1), "listed twice"},
		{strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addr: 127.0.0.1:3306\n  on_missing_gtids: skip\n", 1), "source.on_missing_gtids (line 5): \"skip\" is not allowed"},
	} {
		if got := mustFail(t, tc.yaml, noEnv); !strings.Contains(got, tc.want) {
			t.Errorf("got %s\nwant %s", got, tc.want)
		}
	}
}

// With several candidates the mysql store's writer is not one of them by default: it is the
// primary wherever that is, so it must be named.
func TestWriterAddrRequiredWithSeveralAddrs(t *testing.T) {
	y := strings.Replace(minimal, "  addr: 127.0.0.1:3306\n", "  addrs: [\"10.0.0.1:3306\", \"10.0.0.2:3306\"]\n", 1) +
		"checkpoint: {store: mysql, name: orders}\n"
	if got := mustFail(t, y, noEnv); !strings.Contains(got, "checkpoint.writer_addr (line 13): is required with several source.addrs") {
		t.Fatalf("got %s", got)
	}
	c, err := parse([]byte(strings.Replace(y, "name: orders}", "name: orders, writer_addr: \"primary.db:3306\"}", 1)), noEnv)
	if err != nil || c.Checkpoint.WriterAddr != "primary.db:3306" {
		t.Fatalf("%v %+v", err, c.Checkpoint)
	}
}

// The default lock name tells table lists apart (so configs relaying different tables never
// share an HA group), ignores their order and duplicates, and fits GET_LOCK's 64 characters.
func TestDefaultLockName(t *testing.T) {
	a := DefaultLockName("orders", []string{"shop.outbox_event"})
	b := DefaultLockName("orders", []string{"shop.outbox_b"})
	ab := DefaultLockName("orders", []string{"shop.outbox_event", "shop.outbox_b"})
	ba := DefaultLockName("orders", []string{"shop.outbox_b", "shop.outbox_event", "shop.outbox_b"})
	if a == b || a == ab || b == ab {
		t.Fatalf("different table lists share a lock name: %s %s %s", a, b, ab)
	}
	if ab != ba {
		t.Fatalf("order or duplicates change the name: %s vs %s", ab, ba)
	}
	if !strings.HasPrefix(a, "outboxd.orders.") || len(a) != len("outboxd.orders.")+8 {
		t.Fatalf("short name %q, want outboxd.orders.<8 hex>", a)
	}
	long := strings.Repeat("n", 64)
	l1 := DefaultLockName(long, []string{"shop.outbox_event"})
	l2 := DefaultLockName(long[:63]+"m", []string{"shop.outbox_event"})
	if len(l1) > 64 || l1 == l2 || l1 == DefaultLockName(long, []string{"shop.outbox_b"}) {
		t.Fatalf("long names: %q (%d) %q", l1, len(l1), l2)
	}
}
