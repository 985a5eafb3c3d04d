package binlog

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// A row change logged as a statement (binlog_format=STATEMENT, or MIXED choosing it) carries
// the SQL text, not the row: outboxd cannot read an outbox row from it, so meeting one on an
// outbox table stops the stream before the transaction, which therefore is never checkpointed.
// A session can SET SESSION binlog_format=STATEMENT whatever the server's global setting, which
// is why only the stream can catch this.

// partialImage is the error for an outbox INSERT whose row image lacks columns (skipped, by
// position): binlog_row_image=MINIMAL leaves out the columns the statement did not set, NOBLOB
// the BLOB/TEXT ones (MariaDB 10.11 also with JSON, which is LONGTEXT there). The values the
// table gave them are not in the binlog, so the row cannot be read.
func (a *Assembler) partialImage(spec TableSpec, names []string, skipped []int) error {
	cols := make([]string, 0, len(skipped))
	for _, i := range skipped {
		if i >= 0 && i < len(names) {
			cols = append(cols, names[i])
		} else {
			cols = append(cols, fmt.Sprintf("#%d", i+1))
		}
	}
	return &StopError{
		Table: spec.Schema + "." + spec.Table, GTID: a.txnGTID(), Setting: "binlog_row_image",
		Problem: fmt.Sprintf("%s inserts a row whose binlog image lacks column(s) %s (binlog_row_image is MINIMAL or NOBLOB, "+
			"which leave out columns the INSERT did not set or BLOB/TEXT/JSON columns), so outboxd cannot read the row; outboxd stopped before that transaction and did not checkpoint it",
			a.txnName(), strings.Join(cols, ", ")),
		Fix: "Set binlog_row_image=FULL on the server and make sure no session writing the outbox runs SET SESSION binlog_row_image=MINIMAL or NOBLOB. " +
			"The transaction stays in the binlog as it is and stops outboxd again at every start: write its outbox rows again with a full image, then start past it with --from-gtid",
	}
}

// txnName names the open transaction in errors.
func (a *Assembler) txnName() string {
	if a.cur != nil && a.cur.GTID != "" {
		return "transaction " + a.cur.GTID
	}
	return "a transaction"
}

// txnGTID is the open transaction's GTID for StopError, "" when it has none.
func (a *Assembler) txnGTID() string {
	if a.cur != nil {
		return a.cur.GTID
	}
	return ""
}

// statementTarget is one table a DML statement writes, as written in it.
type statementTarget struct{ schema, table string }

// checkStatement stops the stream when q, a statement executed with default schema db, writes a
// configured outbox table. It is called for every QUERY event; most are BEGIN, COMMIT or DDL
// and are dismissed on their first word.
func (a *Assembler) checkStatement(db, q string) error {
	verb, targets := dmlTargets(q)
	for i := range targets {
		if targets[i].schema == "" {
			targets[i].schema = db
		}
		for k, st := range a.tables {
			if strings.EqualFold(targets[i].schema, k.schema) && strings.EqualFold(targets[i].table, k.table) {
				return a.unreadableStatement(st.spec, verb)
			}
		}
	}
	// No target is an outbox table, but a trigger on a table of an outbox table's schema, a
	// view over the outbox or a stored function may have written outbox rows, and the binlog
	// then holds only the outer statement: outboxd cannot tell, so it stops rather than risk
	// skipping them. A logged SELECT or DO is there only because a function it called wrote data.
	for _, t := range targets {
		for k, st := range a.tables {
			if strings.EqualFold(t.schema, k.schema) {
				return a.hiddenWrites(st.spec, fmt.Sprintf("statement-logged %s into %s.%s", verb, t.schema, t.table))
			}
		}
	}
	if v := sideEffectVerb(q); v != "" {
		lq := strings.ToLower(q)
		for k, st := range a.tables {
			ls := strings.ToLower(k.schema)
			if strings.EqualFold(db, k.schema) || strings.Contains(lq, ls+".") || strings.Contains(lq, "`"+ls+"`.") {
				return a.hiddenWrites(st.spec, "statement-logged "+v+" calling a stored function")
			}
		}
	}
	return nil
}

// sideEffectVerb returns "SELECT" or "DO" for a statement of that kind (after comments), "" for
// any other. Under row-based logging neither is ever in the binlog.
func sideEffectVerb(q string) string {
	lx := lexer{s: q}
	first := lx.next()
	for _, v := range []string{"SELECT", "DO"} {
		if first.isWord(v) {
			return v
		}
	}
	return ""
}

// hiddenWrites is the error for a statement-logged write in an outbox table's schema whose
// triggers, views or functions may have written outbox rows that the binlog holds only as SQL.
func (a *Assembler) hiddenWrites(spec TableSpec, what string) error {
	return &StopError{
		Table: spec.Schema + "." + spec.Table, GTID: a.txnGTID(), Setting: "binlog_format",
		Problem: fmt.Sprintf("%s has a %s in the outbox table's schema; a trigger, a view or a stored function may have written outbox rows "+
			"that the binlog then holds only as that SQL text, which outboxd cannot read or rule out, so it stopped before that transaction and did not checkpoint it",
			a.txnName(), what),
		Fix: "Set binlog_format=ROW on the server and make sure no session runs SET SESSION binlog_format=STATEMENT or MIXED. " +
			"If that transaction wrote no outbox rows, start past it with --from-gtid; if it did, write them again from a row-logged session first",
	}
}

func (a *Assembler) unreadableStatement(spec TableSpec, verb string) error {
	return &StopError{
		Table: spec.Schema + "." + spec.Table, GTID: a.txnGTID(), Setting: "binlog_format",
		Problem: fmt.Sprintf("%s writes it with a statement-logged %s, which carries SQL text instead of rows, so outboxd cannot read the outbox rows; "+
			"outboxd stopped before that transaction and did not checkpoint it", a.txnName(), verb),
		Fix: "Set binlog_format=ROW on the server (MariaDB's default MIXED logs some INSERTs as statements) " +
			"and make sure no session writing the outbox runs SET SESSION binlog_format=STATEMENT or MIXED. " +
			"The transaction stays in the binlog as it is and stops outboxd again at every start: write its outbox rows again from a row-logged session, then start past it with --from-gtid",
	}
}

// executeLoadQuery returns the statement text of MySQL/MariaDB's EXECUTE_LOAD_QUERY event (the
// statement-logged LOAD DATA), which go-mysql does not decode. The text may end in the event's
// checksum bytes; callers look only at its start.
// checkLoad is checkStatement for a statement-logged LOAD DATA (EXECUTE_LOAD_QUERY event).
func (a *Assembler) checkLoad(ev *replication.BinlogEvent) error {
	db, q, ok := executeLoadQuery(ev.RawData)
	if !ok {
		return &StopError{GTID: a.txnGTID(), Setting: "binlog_format",
			Problem: fmt.Sprintf("statement-logged LOAD DATA event too short to read (%d bytes): outboxd cannot tell whether it loads an outbox table", len(ev.RawData)),
			Fix:     "set binlog_format=ROW on the server"}
	}
	return a.checkStatement(db, q)
}

// executeLoadQuery returns the default schema and the statement text of an EXECUTE_LOAD_QUERY
// event (raw, header included), which go-mysql does not decode. The text may end in the
// event's checksum bytes; callers look only at its start.
func executeLoadQuery(raw []byte) (db, q string, ok bool) {
	// Post-header: the query event's 13 bytes (thread id 4, exec time 4, schema length 1, error
	// code 2, status vars length 2), then file id 4, start and end position 4+4, duplicate
	// handling 1. Then the status vars, the schema and a NUL, the statement.
	const header, postHeader = replication.EventHeaderSize, 26
	if len(raw) < header+postHeader {
		return "", "", false
	}
	dbLen := int(raw[header+8])
	statusLen := int(binary.LittleEndian.Uint16(raw[header+11:]))
	dbStart := header + postHeader + statusLen
	if dbStart+dbLen+1 > len(raw) {
		return "", "", false
	}
	return string(raw[dbStart : dbStart+dbLen]), string(raw[dbStart+dbLen+1:]), true
}

// dmlTargets returns the statement's verb and the tables it inserts into, replaces, updates,
// deletes from or loads into, as written (schema "" when unqualified). Statements of any other
// kind have no targets. It errs on the side of naming a table: a false target only stops
// outboxd with advice to use row-based logging, which it needs anyway.
func dmlTargets(q string) (verb string, targets []statementTarget) {
	lx := lexer{s: q}
	first := lx.next()
	if first.isWord("SET") {
		first = lx.skipSetStatement() // MariaDB: SET STATEMENT var=value [, ...] FOR INSERT ...
	}
	if first.kind == tokWord && strings.EqualFold(first.text, "WITH") {
		first = lx.skipWith() // MySQL 8: WITH cte AS (...) UPDATE/DELETE ...
	}
	if first.kind != tokWord {
		return "", nil
	}
	verb = strings.ToUpper(first.text)
	switch verb {
	case "INSERT", "REPLACE":
		t := lx.skipWords("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO")
		if n, ok := lx.tableName(t); ok {
			targets = append(targets, n)
		}
	case "LOAD":
		// LOAD DATA|XML [LOW_PRIORITY|CONCURRENT] [LOCAL] INFILE 'f' [REPLACE|IGNORE] INTO TABLE t
		verb = "LOAD DATA"
		for t := lx.next(); t.kind != tokEOF; t = lx.next() {
			if t.isWord("INTO") {
				if t = lx.next(); t.isWord("TABLE") {
					if n, ok := lx.tableName(lx.next()); ok {
						targets = append(targets, n)
					}
				}
				break
			}
		}
	case "UPDATE":
		// The table references come before SET; any of them may be updated.
		targets = lx.tableRefs(lx.skipWords("LOW_PRIORITY", "IGNORE"), "SET")
	case "DELETE":
		// DELETE [mods] FROM t ..., DELETE t1, t2 FROM refs ..., DELETE FROM t1 USING refs:
		// every name before WHERE/ORDER/LIMIT may be a target.
		targets = lx.tableRefs(lx.skipWords("LOW_PRIORITY", "QUICK", "IGNORE"), "WHERE", "ORDER", "LIMIT", "RETURNING")
	default:
		return "", nil
	}
	return verb, targets
}

type tokKind int

const (
	tokEOF    tokKind = iota
	tokWord           // bare identifier or keyword
	tokQuoted         // `identifier`, or "identifier" under ANSI_QUOTES (else a string)
	tokString         // 'string'
	tokPunct          // one byte: . , ( ) ; * =
)

type token struct {
	kind tokKind
	text string
}

func (t token) isWord(w string) bool { return t.kind == tokWord && strings.EqualFold(t.text, w) }

// ident reports whether t can name a schema or table.
func (t token) ident() bool { return t.kind == tokWord || t.kind == tokQuoted }

// lexer splits just enough SQL to find table names: identifiers, quoted names, strings and
// punctuation; comments are dropped, except that the text of executable comments (/*! ... */
// and MariaDB's /*M! ... */) is read as code.
type lexer struct {
	s     string
	i     int
	depth int // open parentheses
}

func (lx *lexer) next() token {
	for lx.i < len(lx.s) {
		c := lx.s[lx.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			lx.i++
		case c == '#' || isDashComment(lx.s[lx.i:]):
			if end := strings.IndexByte(lx.s[lx.i:], '\n'); end >= 0 {
				lx.i += end + 1
			} else {
				lx.i = len(lx.s)
			}
		case strings.HasPrefix(lx.s[lx.i:], "/*!") || strings.HasPrefix(lx.s[lx.i:], "/*M!"):
			lx.i += strings.IndexByte(lx.s[lx.i:], '!') + 1
			for lx.i < len(lx.s) && lx.s[lx.i] >= '0' && lx.s[lx.i] <= '9' {
				lx.i++ // version
			}
		case strings.HasPrefix(lx.s[lx.i:], "*/"): // end of an executable comment
			lx.i += 2
		case strings.HasPrefix(lx.s[lx.i:], "/*"):
			if end := strings.Index(lx.s[lx.i+2:], "*/"); end >= 0 {
				lx.i += 2 + end + 2
			} else {
				lx.i = len(lx.s)
			}
		case c == '`' || c == '"':
			return token{tokQuoted, lx.quoted(c)}
		case c == '\'':
			return token{tokString, lx.quoted(c)}
		case isIdentByte(c):
			start := lx.i
			for lx.i < len(lx.s) && isIdentByte(lx.s[lx.i]) {
				lx.i++
			}
			return token{tokWord, lx.s[start:lx.i]}
		default:
			lx.i++
			switch c {
			case '(':
				lx.depth++
			case ')':
				lx.depth--
			}
			return token{tokPunct, string(c)}
		}
	}
	return token{kind: tokEOF}
}

// quoted reads a token quoted with q (doubled q inside; backslash escapes in strings).
func (lx *lexer) quoted(q byte) string {
	var sb strings.Builder
	lx.i++
	for lx.i < len(lx.s) {
		c := lx.s[lx.i]
		switch {
		case c == '\\' && q != '`' && lx.i+1 < len(lx.s):
			sb.WriteByte(lx.s[lx.i+1])
			lx.i += 2
		case c == q && lx.i+1 < len(lx.s) && lx.s[lx.i+1] == q:
			sb.WriteByte(q)
			lx.i += 2
		case c == q:
			lx.i++
			return sb.String()
		default:
			sb.WriteByte(c)
			lx.i++
		}
	}
	return sb.String()
}

// skipWords returns the first token that is none of words.
func (lx *lexer) skipWords(words ...string) token {
	for {
		t := lx.next()
		if t.kind != tokWord {
			return t
		}
		skip := false
		for _, w := range words {
			if strings.EqualFold(t.text, w) {
				skip = true
				break
			}
		}
		if !skip {
			return t
		}
	}
}

// tableName reads "name" or "schema.name" starting at t.
func (lx *lexer) tableName(t token) (statementTarget, bool) {
	if !t.ident() {
		return statementTarget{}, false
	}
	save, depth := lx.i, lx.depth
	if dot := lx.next(); dot.kind == tokPunct && dot.text == "." {
		if n := lx.next(); n.ident() {
			return statementTarget{schema: t.text, table: n.text}, true
		}
	}
	lx.i, lx.depth = save, depth
	return statementTarget{table: t.text}, true
}

// tableRefs collects every name outside parentheses from t up to one of the stop words.
func (lx *lexer) tableRefs(t token, stop ...string) []statementTarget {
	var out []statementTarget
	for ; t.kind != tokEOF; t = lx.next() {
		if lx.depth > 0 || (t.kind == tokPunct && t.text == ")") {
			continue
		}
		if t.kind == tokWord {
			for _, w := range stop {
				if strings.EqualFold(t.text, w) {
					return out
				}
			}
		}
		if n, ok := lx.tableName(t); ok {
			out = append(out, n)
		}
	}
	return out
}

// skipWith skips a leading "WITH [RECURSIVE] name [(cols)] AS (...) [, ...]" and returns the
// token after it.
func (lx *lexer) skipWith() token {
	for {
		t := lx.next()
		if t.kind == tokEOF {
			return t
		}
		if lx.depth == 0 && t.kind == tokWord && !t.isWord("RECURSIVE") && !t.isWord("AS") {
			// A CTE name is followed by "AS" or "(": the statement's verb is not.
			save, depth := lx.i, lx.depth
			n := lx.next()
			lx.i, lx.depth = save, depth
			if !n.isWord("AS") && !(n.kind == tokPunct && n.text == "(") {
				return t
			}
		}
	}
}

// isDashComment reports whether s starts a "-- " comment: two dashes and then a blank or a
// control character (the server's lexer takes "--\t" and "--\n" as comments too), or the end.
func isDashComment(s string) bool {
	return strings.HasPrefix(s, "--") && (len(s) == 2 || s[2] <= ' ' || s[2] == 0x7f)
}

// skipSetStatement is called after a leading SET: for MariaDB's "SET STATEMENT var=value [, ...]
// FOR stmt", which the binlog keeps as written, it returns stmt's first token; for any other SET
// it returns EOF (no targets).
func (lx *lexer) skipSetStatement() token {
	if !lx.next().isWord("STATEMENT") {
		return token{kind: tokEOF}
	}
	for t := lx.next(); t.kind != tokEOF; t = lx.next() {
		if lx.depth == 0 && t.isWord("FOR") {
			return lx.next()
		}
	}
	return token{kind: tokEOF}
}
