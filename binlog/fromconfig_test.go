package binlog

import (
	"testing"

	"github.com/outboxd/outboxd/config"
)

// The reader marks the mysql store's table as outboxd's own; the file store has none.
func TestConfigFromCheckpointTable(t *testing.T) {
	cfg := &config.Config{Source: config.Source{Flavor: "mariadb", Addr: "replica:3306"},
		Checkpoint: config.Checkpoint{Store: "mysql", Table: "o.c", Name: "n"}}
	if ref := ConfigFrom(cfg).CheckpointTable; ref.Schema != "o" || ref.Table != "c" {
		t.Fatalf("CheckpointTable = %+v", ref)
	}
	cfg.Checkpoint = config.Checkpoint{Path: "x.json"}
	if ref := ConfigFrom(cfg).CheckpointTable; ref != (TableRef{}) {
		t.Fatalf("file store marks table %+v", ref)
	}
}
