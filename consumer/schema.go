package consumer

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
)

// Schema is the DDL of the kit's tables under their default names (consumer/schema.sql):
// statements separated by ";", with "--" comment lines.
//
//go:embed schema.sql
var Schema string

// DDL returns the statements that create k's tables (under its configured names) if they do
// not exist, one statement each. Pure.
func (k *Kit) DDL() []string {
	r := strings.NewReplacer("`"+DefaultDedupTable+"`", k.dedup, "`"+DefaultQuarantineTable+"`", k.quarantine)
	var out []string
	for _, stmt := range strings.Split(Schema, ";") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 0 {
			out = append(out, r.Replace(strings.Join(lines, "\n")))
		}
	}
	return out
}

// CreateTables creates k's tables if they do not exist. It blocks on the statements; the
// ones before a failing statement stay (DDL commits implicitly).
func (k *Kit) CreateTables(ctx context.Context) error {
	for _, stmt := range k.DDL() {
		if _, err := k.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("consumer: create tables: %w", err)
		}
	}
	return nil
}
