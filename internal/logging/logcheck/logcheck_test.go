package logcheck

import (
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	const ts = `"time":"2026-12-01T09:37:36.123+00:00"`
	ok := []string{
		`{"level":"info",` + ts + `,"message":"m"}`,
		`{"level":"warn","retry_in":"1s","backoff":"250ms","give_up_after":"30s",` + ts + `}`,
		`{"level":"info","latency_ms":12,"time":"2026-12-01T09:37:36.123456789Z"}`,
		`{"level":"info","a":{"b":1},"c":[{"b":1},{"b":2}],` + ts + `}`,
		`{"level":"info","sink":"main","topic":"t",` + ts + `}`,
	}
	for _, l := range ok {
		if _, err := Line([]byte(l)); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	bad := map[string]string{
		`{"level":"info","component":"binlog","component":"go-mysql",` + ts + `}`: `duplicate key "component"`,
		`{"level":"info","a":{"x":1,"x":2},` + ts + `}`:                           `duplicate key "a.x"`,
		`{"level":"info","time":"2026-12-01T09:37:36+00:00"}`:                     "milliseconds",
		`{"level":"info","time":"2026-12-01T09:37:36.12Z"}`:                       "milliseconds",
		`{"level":"info"}`: `no string "time"`,
		`{` + ts + `}`:     `no string "level"`,
		`{"level":"warn","retry_in":1000,` + ts + `}`:              "retry_in=1000 has no unit",
		`{"level":"warn","waited":"soon",` + ts + `}`:              "not a Go duration",
		`[mysql] 2026/12/01 09:37:36 packets.go:58 unexpected EOF`: "invalid character",
		`{"level":"info",` + ts + `} {"level":"info",` + ts + `}`:  "more than one",
		`"x"`: "not a JSON object",
	}
	for l, want := range bad {
		_, err := Line([]byte(l))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", l, err, want)
		}
	}
}

func TestLines(t *testing.T) {
	const l = `{"level":"info","time":"2026-12-01T09:37:36.123Z"}`
	if got, err := Lines([]byte(l + "\n" + l + "\n")); err != nil || len(got) != 2 {
		t.Fatalf("%v, %v", got, err)
	}
	if got, err := Lines(nil); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	if _, err := Lines([]byte(l + "\n[mysql] raw\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("raw line: %v", err)
	}
}
