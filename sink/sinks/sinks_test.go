package sinks

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
)

// A sink that fails to open does not keep the others from opening; Open (run) still fails
// as a whole, naming every sink that failed.
func TestOpenEachSinkOpensTheOthers(t *testing.T) {
	cfg, err := config.Parse([]byte(`source: {flavor: mariadb, addr: "127.0.0.1:1", user: u, password: "", server_id: 7}
tables: [{table: shop.outbox_event}]
sinks:
  good: {type: kafka, brokers: ["127.0.0.1:1"]}
  small1: {type: kafka, brokers: ["127.0.0.1:1"], max_message_bytes: 100}
  small2: {type: kafka, brokers: ["127.0.0.1:1"], max_message_bytes: 200}
routes: [{sink: good}, {sink: small1}, {sink: small2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	sinks, failed := OpenEach(cfg, zerolog.Nop(), zerolog.Nop())
	defer func() {
		for _, s := range sinks {
			s.Close()
		}
	}()
	if len(sinks) != 1 || sinks["good"] == nil || len(failed) != 2 ||
		!strings.HasPrefix(failed["small1"].Error(), "sinks.small1: ") || !strings.HasPrefix(failed["small2"].Error(), "sinks.small2: ") {
		t.Fatalf("opened %v, failed %v; want good opened and small1, small2 failed under their names", sinks, failed)
	}
	_, err = Open(cfg, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "sinks.small1: ") || !strings.Contains(err.Error(), "sinks.small2: ") {
		t.Fatalf("Open: %v, want an error naming small1 and small2", err)
	}
}
