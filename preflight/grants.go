package preflight

import (
	"fmt"
	"strings"
)

// grantLevel is what a GRANT line applies to.
type grantLevel int

const (
	levelGlobal grantLevel = iota // ON *.*
	levelDB                       // ON `db`.*  (db may be a LIKE pattern)
	levelTable                    // ON `db`.`table`
	levelOther                    // ON PROCEDURE/FUNCTION/PACKAGE ..., PROXY: irrelevant here
)

// grant is one parsed line of SHOW GRANTS.
type grant struct {
	Revoke bool // a MySQL partial revoke line ("REVOKE SELECT ON `db`.* FROM ...")
	Level  grantLevel
	DB     string // unquoted; for levelDB a LIKE pattern unless Exact
	Table  string
	// Privs are upper-case privilege names with single spaces ("REPLICATION SLAVE"). A column-level
	// privilege ("SELECT (`a`, `b`)") is recorded in ColumnPrivs instead: it does not allow
	// reading the whole row.
	Privs       map[string]bool
	ColumnPrivs map[string]bool
	// Roles are granted roles ("GRANT `r1` TO ..." / "GRANT `r1`@`%` TO ..."), as written.
	Roles []string
}

// hasPriv reports whether g grants p, taking ALL [PRIVILEGES] into account.
func (g grant) hasPriv(p string) bool {
	return g.Privs[p] || g.Privs["ALL"] || g.Privs["ALL PRIVILEGES"]
}

// parseGrant parses one line of SHOW GRANTS output from MySQL 5.7/8.x or MariaDB 10.x. Lines it
// does not understand (SET DEFAULT ROLE, ...) return ok=false and no error; malformed GRANT lines
// return an error. It never panics.
func parseGrant(line string) (g grant, ok bool, err error) {
	line = strings.TrimSpace(line)
	upper := strings.ToUpper(line)
	switch {
	case strings.HasPrefix(upper, "GRANT "):
		line = strings.TrimSpace(line[len("GRANT "):])
	case strings.HasPrefix(upper, "REVOKE "):
		g.Revoke = true
		line = strings.TrimSpace(line[len("REVOKE "):])
	default:
		return grant{}, false, nil
	}
	toks, err := tokenize(line)
	if err != nil {
		return grant{}, false, fmt.Errorf("parse grant %q: %w", line, err)
	}
	on := indexWord(toks, "ON")
	if on < 0 {
		if g.Revoke {
			return grant{}, false, nil
		}
		// Role grant: GRANT `r1`, `r2`@`%` TO `u`@`%`
		to := indexWord(toks, "TO")
		if to < 0 {
			return grant{}, false, fmt.Errorf("parse grant %q: neither ON nor TO", line)
		}
		for _, part := range splitComma(toks[:to]) {
			var sb strings.Builder
			for _, t := range part {
				sb.WriteString(t.text)
			}
			if sb.Len() > 0 {
				g.Roles = append(g.Roles, sb.String())
			}
		}
		return g, true, nil
	}
	g.Privs, g.ColumnPrivs = map[string]bool{}, map[string]bool{}
	for _, part := range splitComma(toks[:on]) {
		var words []string
		column := false
		for _, t := range part {
			if t.kind == tokParen {
				column = true
				continue
			}
			words = append(words, strings.ToUpper(t.text))
		}
		if len(words) == 0 {
			continue
		}
		name := strings.Join(words, " ")
		if column {
			g.ColumnPrivs[name] = true
		} else {
			g.Privs[name] = true
		}
	}
	// Object: *.* | db.* | db.tbl | PROCEDURE db.p | FUNCTION ... | PACKAGE [BODY] ... | ``@`%` (PROXY)
	end := indexWord(toks, "TO")
	if g.Revoke {
		end = indexWord(toks, "FROM")
	}
	if end < 0 {
		end = len(toks)
	}
	obj := toks[on+1 : end]
	if len(obj) > 0 && obj[0].kind == tokWord {
		switch strings.ToUpper(obj[0].text) {
		case "TABLE":
			obj = obj[1:]
		case "PROCEDURE", "FUNCTION", "PACKAGE":
			g.Level = levelOther
			return g, true, nil
		}
	}
	if g.Privs["PROXY"] {
		g.Level = levelOther
		return g, true, nil
	}
	// Expect name '.' name, where names may be quoted, bare or '*'.
	dot := -1
	for i, t := range obj {
		if t.kind == tokDot {
			dot = i
			break
		}
	}
	if dot != 1 || len(obj) != 3 {
		return grant{}, false, fmt.Errorf("parse grant %q: unexpected object after ON", line)
	}
	db, tbl := obj[0], obj[2]
	switch {
	case db.text == "*" && db.kind == tokWord:
		g.Level = levelGlobal
	case tbl.text == "*" && tbl.kind == tokWord:
		g.Level, g.DB = levelDB, db.text
	default:
		g.Level, g.DB, g.Table = levelTable, db.text, tbl.text
	}
	return g, true, nil
}

type tokKind int

const (
	tokWord   tokKind = iota // bare word, keyword or *
	tokComma                 // ,
	tokDot                   // .
	tokParen                 // a parenthesized group, kept whole (column lists)
	tokAt                    // @
	tokQuoted                // a quoted identifier or string, unquoted
)

type token struct {
	kind tokKind
	text string
}

// tokenize splits a grant line into words, quoted names (`x`, 'x', "x" with doubled-quote
// escapes), punctuation and parenthesized groups.
func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ',':
			toks = append(toks, token{tokComma, ","})
			i++
		case c == '.':
			toks = append(toks, token{tokDot, "."})
			i++
		case c == '@':
			toks = append(toks, token{tokAt, "@"})
			i++
		case c == '`' || c == '\'' || c == '"':
			var sb strings.Builder
			j := i + 1
			closed := false
			for j < len(s) {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						sb.WriteByte(c)
						j += 2
						continue
					}
					closed = true
					j++
					break
				}
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					sb.WriteByte(s[j+1])
					j += 2
					continue
				}
				sb.WriteByte(s[j])
				j++
			}
			if !closed {
				return nil, fmt.Errorf("unterminated %c quote", c)
			}
			toks = append(toks, token{tokQuoted, sb.String()})
			i = j
		case c == '(':
			depth, j := 0, i
			var q byte
			for ; j < len(s); j++ {
				switch {
				case q != 0:
					if s[j] == q {
						q = 0
					}
				case s[j] == '`' || s[j] == '\'' || s[j] == '"':
					q = s[j]
				case s[j] == '(':
					depth++
				case s[j] == ')':
					depth--
				}
				if depth == 0 && q == 0 {
					break
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unbalanced parenthesis")
			}
			toks = append(toks, token{tokParen, s[i : j+1]})
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\r\n,.@`'\"()", rune(s[j])) {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected %q", s[i])
			}
			toks = append(toks, token{tokWord, s[i:j]})
			i = j
		}
	}
	return toks, nil
}

// indexWord finds the first bare (unquoted) word w, case-insensitively.
func indexWord(toks []token, w string) int {
	for i, t := range toks {
		if t.kind == tokWord && strings.EqualFold(t.text, w) {
			return i
		}
	}
	return -1
}

func splitComma(toks []token) [][]token {
	var out [][]token
	var cur []token
	for _, t := range toks {
		if t.kind == tokComma {
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	return append(out, cur)
}

// grants is the parsed SHOW GRANTS output of one account (with its active roles).
type grants []grant

// has reports whether any global grant gives one of privs.
func (gs grants) hasGlobal(privs ...string) bool {
	for _, g := range gs {
		if g.Revoke || g.Level != levelGlobal {
			continue
		}
		for _, p := range privs {
			if g.hasPriv(p) {
				return true
			}
		}
	}
	return false
}

// canSelect reports whether the grants allow SELECT on every column of schema.table: a global,
// database-level (including LIKE patterns) or table-level grant, not undone by a partial revoke.
// Name comparison is exact for tables and case-sensitive, like a server with
// lower_case_table_names=0; on case-insensitive servers a mismatch yields a false problem report
// rather than a silent pass.
func (gs grants) canSelect(schema, table string) bool { return gs.can("SELECT", schema, table) }

// can is canSelect for any table privilege priv.
func (gs grants) can(priv, schema, table string) bool {
	ok := false
	for _, g := range gs {
		if g.Revoke {
			continue
		}
		switch g.Level {
		case levelGlobal:
			ok = ok || g.hasPriv(priv)
		case levelDB:
			ok = ok || (g.hasPriv(priv) && likeMatch(g.DB, schema))
		case levelTable:
			ok = ok || (g.hasPriv(priv) && g.DB == schema && g.Table == table)
		}
	}
	if !ok {
		return false
	}
	// MySQL partial_revokes: "REVOKE SELECT ON `db`.* FROM u" removes a global grant for db.
	for _, g := range gs {
		if g.Revoke && g.Level == levelDB && g.hasPriv(priv) && g.DB == schema {
			return false
		}
	}
	return true
}

// likeMatch matches a database name against a grant's LIKE pattern (% and _ wildcards, \ escapes),
// as the server does for database-level grants.
func likeMatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '%':
		for i := 0; i <= len(s); i++ {
			if likeMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '_':
		return s != "" && likeMatch(pattern[1:], s[1:])
	case '\\':
		if len(pattern) > 1 {
			return s != "" && s[0] == pattern[1] && likeMatch(pattern[2:], s[1:])
		}
	}
	return s != "" && s[0] == pattern[0] && likeMatch(pattern[1:], s[1:])
}
