package config

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser: it must return a config or an error, never
// panic, and whatever it accepts must be valid and printable with secrets hidden.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(full))
	lookup := envMap(map[string]string{"PW": "s3cr3t-value", "SK": "s3cr3t-value", "ID": "12", "EMPTY": ""})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data, lookup)
		if err != nil {
			if c != nil {
				t.Fatalf("config returned with error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parse accepted a config that Validate rejects: %v", err)
		}
		s := c.String()
		if c.Source.Password == "s3cr3t-value" && strings.Contains(s, "s3cr3t-value") {
			t.Fatalf("String leaks the password:\n%s", s)
		}
	})
}
