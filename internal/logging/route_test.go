package logging

import (
	"bytes"
	"log"
	"os"
	"testing"

	"github.com/rs/zerolog"
)

// What a library prints with package log (net/http's "http: TLS handshake error ...") is a
// JSON line of the stream.
func TestRouteStdlib(t *testing.T) {
	var buf bytes.Buffer
	flags, prefix := log.Flags(), log.Prefix()
	RouteStdlib(New(&buf, zerolog.InfoLevel))
	t.Cleanup(func() { log.SetOutput(os.Stderr); log.SetFlags(flags); log.SetPrefix(prefix) })
	log.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:1")
	got := lines(t, &buf)
	if len(got) != 1 || got[0]["message"] != "http: TLS handshake error from 127.0.0.1:1: EOF" || got[0]["library"] != "log" || got[0]["level"] != "warn" {
		t.Fatalf("got %v", got)
	}
}
