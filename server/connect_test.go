package server

import (
	"testing"

	"github.com/outboxd/outboxd/config"
)

// The mysql store's writer is reached at checkpoint.writer_addr with source's credentials.
func TestWriterConn(t *testing.T) {
	cfg := &config.Config{Source: config.Source{Flavor: "mariadb", Addr: "replica:3306", User: "u", Password: "p"},
		Checkpoint: config.Checkpoint{Store: "mysql", Table: "o.c", Name: "n", WriterAddr: "primary:3306"}}
	c := WriterConn(cfg)
	if c.Addr != "primary:3306" || c.User != "u" || c.Password != "p" {
		t.Fatalf("WriterConn = %+v", c)
	}
	cfg.Checkpoint.WriterAddr = ""
	if c := WriterConn(cfg); c.Addr != "replica:3306" {
		t.Fatalf("WriterConn without writer_addr = %+v, want the source", c)
	}
}
