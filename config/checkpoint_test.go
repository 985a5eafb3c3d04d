package config

import (
	"strings"
	"testing"
)

func TestCheckpointStoreDefaults(t *testing.T) {
	c, err := parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Checkpoint.Store != "" || c.Checkpoint.Path != DefaultCheckpointPath || c.Checkpoint.MySQL() {
		t.Errorf("file store defaults: %+v", c.Checkpoint)
	}
	c, err = parse([]byte(minimal+"checkpoint: {store: mysql, name: orders-relay}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Checkpoint{Store: "mysql", Table: DefaultCheckpointTable, Name: "orders-relay", WriterAddr: "127.0.0.1:3306", Interval: DefaultCheckpointInterval}
	if c.Checkpoint != want {
		t.Errorf("mysql store defaults: %+v, want %+v", c.Checkpoint, want)
	}
	if got := c.Checkpoint.Where(); !strings.Contains(got, "outboxd.checkpoint") || !strings.Contains(got, `"orders-relay"`) {
		t.Errorf("Where() = %q", got)
	}
	c, err = parse([]byte(minimal+"checkpoint: {store: mysql, name: a, table: ops.ck, writer_addr: 10.0.0.1:3306}\n"), noEnv)
	if err != nil || c.Checkpoint.WriterAddr != "10.0.0.1:3306" || c.Checkpoint.Table != "ops.ck" {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestCheckpointStoreValidation(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"checkpoint: {store: redis}", `checkpoint.store (line 13): "redis" is not allowed`},
		{"checkpoint: {store: mysql}", "checkpoint.name (line 13): is required for store: mysql"},
		{"checkpoint: {store: mysql, name: \"a b\"}", "checkpoint.name"},
		{"checkpoint: {store: mysql, name: \"x'; DROP\"}", "checkpoint.name"},
		{"checkpoint: {store: mysql, name: a, table: nodot}", `checkpoint.table (line 13): "nodot" is not "schema.table"`},
		{"checkpoint: {store: mysql, name: a, table: shop.outbox_event}", "is an outbox table"},
		{"checkpoint: {store: mysql, name: a, path: /var/lib/ck.json}", "checkpoint.path (line 13): is only for store: file"},
		{"checkpoint: {store: mysql, name: a, writer_addr: nohostport}", "checkpoint.writer_addr"},
		{"checkpoint: {name: a}", "checkpoint.name (line 13): is only for store: mysql"},
		{"checkpoint: {table: a.b}", "checkpoint.table (line 13): is only for store: mysql"},
		{"checkpoint: {writer_addr: \"h:1\"}", "checkpoint.writer_addr (line 13): is only for store: mysql"},
	}
	for _, c := range cases {
		got := mustFail(t, minimal+c.yaml+"\n", noEnv)
		wantContains(t, got, c.want)
	}
	if !checkpointNameRe.MatchString("orders-relay.eu:1_a") || checkpointNameRe.MatchString(strings.Repeat("a", 65)) {
		t.Error("checkpoint name charset")
	}
}
