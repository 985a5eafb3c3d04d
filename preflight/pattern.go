package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/server"
)

// expandPatterns returns cfg with every tables[].pattern entry replaced by the tables on db it
// matches now (config.Expand), so each is checked as a listed table is, and a warning for each
// pattern that matches none: its tables may be created later, and outboxd picks them up then.
// It blocks on one query per pattern.
func expandPatterns(ctx context.Context, db *sql.DB, cfg *config.Config) (*config.Config, []Problem, error) {
	idx, pats := cfg.TablePatterns()
	if len(idx) == 0 {
		return cfg, nil, nil
	}
	found := make(map[string][]string, len(pats))
	for _, p := range pats {
		schema, _ := p.Globs()
		names, err := server.BaseTables(ctx, db, literalPrefix(schema))
		if err != nil {
			return nil, nil, fmt.Errorf("tables[].pattern %s: %w", p, err)
		}
		found[p.String()] = names
	}
	x, empty := cfg.Expand(func(p config.TablePattern) []string { return found[p.String()] })
	var ps []Problem
	for _, i := range empty {
		ps = append(ps, Problem{
			Setting: fmt.Sprintf("tables[%d].pattern", i), Check: CheckTableExists, Warning: true,
			Found: fmt.Sprintf("%q, which matches no table the account can see", cfg.Tables[i].Pattern),
			Fix:   "check the pattern (globs are anchored and case-sensitive); a matching table created later is checked and relayed from its first row",
		})
	}
	return x, ps, nil
}

// literalPrefix is the part of a path.Match glob before its first metacharacter.
func literalPrefix(glob string) string {
	if i := strings.IndexAny(glob, `*?[\`); i >= 0 {
		return glob[:i]
	}
	return glob
}

// Admitter is the binlog reader's binlog.TableAdmitter: Admit on the streaming source. A
// failure to inspect the table (the connection broke) ends the stream as a lost connection, to
// be checked again from the acknowledged position; a table that fails the checks stops outboxd.
type Admitter struct {
	Config *config.Config
	DB     *sql.DB
	Log    zerolog.Logger
}

// Admit implements binlog.TableAdmitter. It blocks on the checks.
func (a Admitter) Admit(ctx context.Context, schema, table, _ string) error {
	err := Admit(ctx, a.DB, a.Config, schema, table, a.Log)
	if err != nil && !errors.Is(err, ErrNotSetUp) && sqlerr.Transient(err) {
		return binlog.MarkDisconnected(err)
	}
	return err
}

// Admit checks one table a tables[].pattern entry matched while outboxd runs (found in the
// binlog at its first row) with Gate's checks, so it passes or fails as a table listed at start
// would, with the same lines. It logs only the warnings about the table: the server's were
// logged at start, and would otherwise repeat for every new table. It blocks on the inspection
// queries, at most 30 s; a failure to inspect is returned as is (not ErrNotSetUp). Safe for
// concurrent use.
func Admit(ctx context.Context, db *sql.DB, cfg *config.Config, schema, table string, log zerolog.Logger) error {
	one, ok := cfg.Only(schema, table)
	if !ok {
		return fmt.Errorf("outbox table %s.%s: no tables[] entry names or matches it", schema, table)
	}
	name := schema + "." + table
	return gate(ctx, db, one, log, func(p Problem) bool { return p.Table == name })
}
