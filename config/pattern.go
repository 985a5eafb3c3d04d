package config

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// TablePattern is a parsed tables[].pattern: a glob for the schema and a glob for the table,
// in path.Match syntax (* any run of characters, ? one character, [0-9] a class, \ escapes), the
// same syntax as routes[].match.table. Each glob is anchored: it matches the whole name, and *
// never crosses the dot between schema and table. Names are compared case-sensitively, as the
// binlog writes them. The zero value matches nothing. Immutable, safe for concurrent use.
type TablePattern struct {
	text, schema, table string
}

// globChars are the characters that make a name a glob.
const globChars = "*?["

// ParseTablePattern parses "schema_glob.table_glob". The error says what is wrong and what is
// allowed. Pure.
func ParseTablePattern(s string) (TablePattern, error) {
	schema, table, ok := strings.Cut(s, ".")
	switch {
	case s == "":
		return TablePattern{}, errors.New(`is empty; use "schema_glob.table_glob", such as "shop_*.outbox_event"`)
	case !ok || schema == "" || table == "" || strings.Contains(table, "."):
		return TablePattern{}, fmt.Errorf(`%q is not "schema_glob.table_glob" (one dot between a schema glob and a table glob, such as "shop_*.outbox_event")`, s)
	case strings.ContainsAny(s, " \t\r\n`'\"/\x00"):
		return TablePattern{}, fmt.Errorf("%q holds a space, quote or slash; name tables as the server does, without quotes", s)
	case !strings.ContainsAny(s, globChars):
		return TablePattern{}, fmt.Errorf("%q has no * ? or [ ]: it names one table; write it as table: %s", s, s)
	}
	for _, g := range []string{schema, table} {
		if _, err := path.Match(g, ""); err != nil {
			return TablePattern{}, fmt.Errorf("%q is not a valid glob (path.Match syntax: * ? [0-9] and \\ to escape): %w", s, err)
		}
	}
	return TablePattern{text: s, schema: schema, table: table}, nil
}

// Match reports whether schema.table is one of the pattern's tables. Pure.
func (p TablePattern) Match(schema, table string) bool {
	if p.text == "" {
		return false
	}
	ok, _ := path.Match(p.schema, schema)
	if !ok {
		return false
	}
	ok, _ = path.Match(p.table, table)
	return ok
}

// Globs returns the schema glob and the table glob. Pure.
func (p TablePattern) Globs() (schema, table string) { return p.schema, p.table }

// String returns the pattern's text as written.
func (p TablePattern) String() string { return p.text }

// TableOrigin says which pattern entry of the file an expanded table came from.
type TableOrigin struct {
	// Index is the pattern entry's index in the file's tables (its field, tables[Index]).
	Index int
	// Pattern is that entry's pattern text.
	Pattern string
}

// IsPattern reports whether t is a pattern entry (tables[].pattern) rather than one table. Pure.
func (t Table) IsPattern() bool { return t.Pattern != "" }

// Label is the entry's table, or its pattern for a pattern entry. Pure.
func (t Table) Label() string {
	if t.IsPattern() {
		return t.Pattern
	}
	return t.Table
}

// Field names t in messages: tables[i] for the entry at index i, or the pattern entry it was
// expanded from. Pure.
func (t Table) Field(i int) string {
	if t.Origin != nil {
		return fmt.Sprintf("tables[%d]", t.Origin.Index)
	}
	return fmt.Sprintf("tables[%d]", i)
}

// TablePatterns returns the pattern entries' indexes in c.Tables and their parsed patterns, in
// file order. An entry whose pattern does not parse (Validate reports it) is left out. Pure.
func (c *Config) TablePatterns() (idx []int, pats []TablePattern) {
	for i, t := range c.Tables {
		if !t.IsPattern() {
			continue
		}
		if p, err := ParseTablePattern(t.Pattern); err == nil {
			idx, pats = append(idx, i), append(pats, p)
		}
	}
	return idx, pats
}

// TableFor returns the entry that relays schema.table: the listed entry of that name, else the
// first pattern entry that matches it, with its index in c.Tables. Pure; it matches every
// pattern, so a caller on a per-row path caches the answer.
func (c *Config) TableFor(schema, table string) (Table, int, bool) {
	name := schema + "." + table
	for i, t := range c.Tables {
		if !t.IsPattern() && t.Table == name {
			return t, i, true
		}
	}
	idx, pats := c.TablePatterns()
	for k, p := range pats {
		if p.Match(schema, table) {
			return c.Tables[idx[k]], idx[k], true
		}
	}
	return Table{}, -1, false
}

// Expand returns a copy of c in which each pattern entry is replaced by one entry per table it
// matches: found(p) lists the tables ("schema.table") there are now, and the entries keep the
// pattern entry's columns and options with Origin set. A table that is also listed, or that an
// earlier pattern matched, is left to that entry, as TableFor decides. The second result maps
// each pattern entry that matched nothing to its index. The copy shares everything else with c;
// its ScopeTables and LockName are c's. Pure but for found.
func (c *Config) Expand(found func(TablePattern) []string) (*Config, []int) {
	idx, pats := c.TablePatterns()
	if len(idx) == 0 {
		return c, nil
	}
	cp := *c
	cp.Tables = make([]Table, 0, len(c.Tables))
	taken := map[string]bool{}
	for _, t := range c.Tables {
		if !t.IsPattern() {
			cp.Tables = append(cp.Tables, t)
			taken[t.Table] = true
		}
	}
	var empty []int
	for k, p := range pats {
		n := 0
		for _, name := range found(p) {
			schema, table := splitTable(name)
			if taken[name] || !p.Match(schema, table) {
				continue
			}
			taken[name] = true
			t := c.Tables[idx[k]]
			t.Table, t.Pattern = name, ""
			t.Origin = &TableOrigin{Index: idx[k], Pattern: p.String()}
			cp.Tables = append(cp.Tables, t)
			n++
		}
		if n == 0 {
			empty = append(empty, idx[k])
		}
	}
	return &cp, empty
}

// Only returns a copy of c that relays schema.table alone, with the entry TableFor finds for
// it (Origin set when that is a pattern entry), for the checks of one table. Pure.
func (c *Config) Only(schema, table string) (*Config, bool) {
	t, i, ok := c.TableFor(schema, table)
	if !ok {
		return nil, false
	}
	if t.IsPattern() {
		t.Origin = &TableOrigin{Index: i, Pattern: t.Pattern}
		t.Table, t.Pattern = schema+"."+table, ""
	}
	cp := *c
	cp.Tables = []Table{t}
	return &cp, true
}

// validatePatterns checks the pattern entries and what they cannot do yet: cleanup and
// reconcile take concrete tables, and a table found while running has no recorded layout, so
// the binlog must carry column names.
func (c *Config) validatePatterns(p *problems) {
	for i, t := range c.Tables {
		if !t.IsPattern() {
			continue
		}
		field := fmt.Sprintf("tables[%d]", i)
		if t.Table != "" {
			p.add(field+".pattern", "is set together with table %q; an entry names one table (table:) or a pattern of tables (pattern:), not both", t.Table)
			continue
		}
		if _, err := ParseTablePattern(t.Pattern); err != nil {
			p.add(field+".pattern", "%s", err.Error())
			continue
		}
		if _, on := c.CleanupFor(i); on {
			p.add(field+".pattern", "cleanup does not take pattern entries: list these tables with table: (one entry each), or set %s.cleanup.enabled: false", field)
		}
		if c.Reconcile != nil {
			p.add(field+".pattern", "reconcile does not take pattern entries: list these tables with table: (one entry each), or remove the reconcile block")
		}
		if c.Source.AllowMinimalRowMetadata {
			p.add(field+".pattern", "needs binlog_row_metadata=FULL on the server: a table found by pattern while outboxd runs has no recorded column layout to map MINIMAL rows onto; remove source.allow_minimal_row_metadata, or list the tables with table:")
		}
	}
}
