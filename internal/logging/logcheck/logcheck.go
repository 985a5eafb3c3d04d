// Package logcheck checks one line of outboxd's JSON log against the format internal/logging
// promises, for tests that read a real log stream. Pure.
package logcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// timeRE is RFC 3339 with at least milliseconds.
var timeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3,9}(Z|[+-]\d{2}:\d{2})$`)

// durationKey matches field names that hold a duration. Such a field must be a Go duration
// string ("1.5s"); a number has no unit unless the name says it (_ms, _seconds, ...).
var durationKey = regexp.MustCompile(`(^|_)(in|after|timeout|backoff|waited|wait|elapsed|duration|latency|interval|delay|age|lag|period|took)$`)
var unitSuffix = regexp.MustCompile(`_(ns|us|ms|s|seconds|minutes|hours)$`)

// Line parses one log line and returns its top-level fields. It fails if the line is not
// exactly one JSON object, if any object in it has a key twice (encoding/json would keep the
// last silently), if "level" or "time" is missing, if "time" is not RFC 3339 with milliseconds
// or finer, or if a duration field (by its name, see durationKey) is not a Go duration string.
func Line(line []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := walk(dec, ""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value on the line")
	}
	var v any
	dec = json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var ts string
	fields, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	if _, ok := fields["level"].(string); !ok {
		return nil, errors.New(`no string "level"`)
	}
	ts, ok = fields["time"].(string)
	if !ok {
		return nil, errors.New(`no string "time"`)
	}
	if !timeRE.MatchString(ts) {
		return nil, fmt.Errorf("time %q is not RFC 3339 with milliseconds or finer", ts)
	}
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		return nil, fmt.Errorf("time %q: %w", ts, err)
	}
	if err := durations(fields, ""); err != nil {
		return nil, err
	}
	return fields, nil
}

// walk consumes one JSON value from dec, failing on a duplicate key in any object.
func walk(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k := kt.(string)
			if seen[k] {
				return fmt.Errorf("duplicate key %q", path+k)
			}
			seen[k] = true
			if err := walk(dec, path+k+"."); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walk(dec, path); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	return nil
}

func durations(fields map[string]any, path string) error {
	for k, v := range fields {
		if sub, ok := v.(map[string]any); ok {
			if err := durations(sub, path+k+"."); err != nil {
				return err
			}
			continue
		}
		name := strings.ToLower(k)
		if !durationKey.MatchString(name) || unitSuffix.MatchString(name) {
			continue
		}
		switch x := v.(type) {
		case json.Number:
			return fmt.Errorf("duration %s=%s has no unit", path+k, x)
		case string:
			if _, err := time.ParseDuration(x); err != nil {
				return fmt.Errorf("duration %s=%q is not a Go duration: %w", path+k, x, err)
			}
		}
	}
	return nil
}

// Lines checks every line of text with Line and returns their fields, or the first failure
// with its line number and text.
func Lines(text []byte) ([]map[string]any, error) {
	var out []map[string]any
	if len(text) == 0 {
		return nil, nil
	}
	for i, l := range bytes.Split(bytes.TrimRight(text, "\n"), []byte("\n")) {
		f, err := Line(l)
		if err != nil {
			return out, fmt.Errorf("line %d: %w\n%s", i+1, err, l)
		}
		out = append(out, f)
	}
	return out, nil
}
