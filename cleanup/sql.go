package cleanup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// statements builds one table's SQL. Identifiers are quoted once, at New.
type statements struct {
	table, pkList, tuple, eventID, createdAt, hold, label string
	nPK                                                   int
	pk                                                    []string // quoted key columns
	withEventID                                           bool     // the key tuple ends with event_id
	orderBy                                               string
	oldest                                                string
	// wall turns an instant into created_at's terms (a DATETIME's zone); identity otherwise.
	wall func(instant string) string
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func quoteTable(st string) string {
	schema, name, _ := strings.Cut(st, ".")
	return quoteIdent(schema) + "." + quoteIdent(name)
}

func newStatements(t Table) statements {
	cols := make([]string, len(t.PK))
	for i, c := range t.PK {
		cols[i] = quoteIdent(c)
	}
	s := statements{
		table: quoteIdent(t.Schema) + "." + quoteIdent(t.Name), pkList: strings.Join(cols, ", "),
		eventID: quoteIdent(t.EventID), nPK: len(t.PK), pk: cols, label: t.Schema + "." + t.Name,
	}
	s.orderBy = s.pkList
	s.withEventID = !slices.ContainsFunc(t.PK, func(c string) bool { return strings.EqualFold(c, t.EventID) })
	tuple := cols
	if s.withEventID {
		tuple = append(slices.Clone(cols), s.eventID)
	}
	s.tuple = "(" + strings.Join(tuple, ", ") + ")"
	if t.Settings.CreatedAt != "" {
		s.createdAt = quoteIdent(t.Settings.CreatedAt)
		s.hold = quoteTable(t.Settings.HoldTable)
		s.wall = func(instant string) string { return instant }
		if t.CreatedAtDatetime {
			// A DATETIME is wall-clock time of the zone the application writes it in; the
			// bounds are instants (FROM_UNIXTIME and NOW give them in this session's zone):
			// convert them to that zone. An unknown zone gives NULL, which deletes nothing.
			tz := "'" + strings.ReplaceAll(t.Settings.TimeZone, "'", "''") + "'"
			s.wall = func(instant string) string { return "CONVERT_TZ(" + instant + ", @@session.time_zone, " + tz + ")" }
		}
		s.oldest = fmt.Sprintf("SELECT TIMESTAMPDIFF(MICROSECOND, %s, %s) / 1e6 FROM %s ORDER BY %s LIMIT 1", s.createdAt, s.wall("NOW(6)"), s.table, s.orderBy)
	}
	return s
}

// placeholders is "(?, ?), (?, ?)" for n tuples of width w.
func placeholders(n, w int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", w), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

// deleteKeys is one DELETE of at most len(ks) rows: WHERE (pk..., event_id) IN (...), which
// MariaDB and MySQL resolve as a range on the primary key.
func (s statements) deleteKeys(ks []key) (string, []any) {
	w := s.nPK
	if s.withEventID {
		w++
	}
	args := make([]any, 0, len(ks)*w)
	for _, k := range ks {
		args = append(args, k.vals...)
		if s.withEventID {
			args = append(args, k.eventID)
		}
	}
	return "DELETE FROM " + s.table + " WHERE " + s.tuple + " IN (" + placeholders(len(ks), w) + ")", args
}

// cutoffSQL compares created_at with the cutoff (see cutoff) and with the start of the hold
// record (since.go): three arguments, the retention in seconds, the checkpoint bound and the
// lower bound in unix seconds.
func (s statements) cutoffSQL() string {
	return s.createdAt + " < " + s.wall("FROM_UNIXTIME(LEAST(UNIX_TIMESTAMP(NOW(6)) - ?, ?))") + " AND " + s.createdAt + " >= " + s.wall("FROM_UNIXTIME(?)")
}

// candidates selects up to n keys of rows the cutoff takes that are not held, after the key
// after (the previous batch's last; nil for the first batch of a round): the rows a round
// keeps (held, too young, older than the hold record) are read once per round, not again for
// every batch.
func (s statements) candidates(ctx context.Context, db *sql.DB, ret, ck, from float64, after []any, n int) ([][]any, error) {
	args := []any{ret, ck, from, s.label}
	page := ""
	if after != nil {
		var cond string
		cond, args = s.afterKey(after, args)
		page = " AND " + cond
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s t WHERE %s AND t.%s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM %s h WHERE h.tbl = ? AND h.event_id = t.%s)%s ORDER BY %s LIMIT %d",
		s.pkList, s.eventID, s.table, s.cutoffSQL(), s.eventID, s.hold, s.eventID, page, s.orderBy, n)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		vals := make([]any, s.nPK+1)
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

// afterKey is "the primary key is after key" in the expanded form (a > ? OR (a = ? AND b > ?)
// ...), which the range optimizer of MariaDB and MySQL uses where a row comparison (a, b) > (?,
// ?) may scan; it appends its arguments to args.
func (s statements) afterKey(key []any, args []any) (string, []any) {
	var ors []string
	for i := range s.nPK {
		var ands []string
		for j := range i {
			ands = append(ands, s.pk[j]+" = ?")
			args = append(args, key[j])
		}
		ands = append(ands, s.pk[i]+" > ?")
		args = append(args, key[i])
		ors = append(ors, "("+strings.Join(ands, " AND ")+")")
	}
	return "(" + strings.Join(ors, " OR ") + ")", args
}

// deleteSwept deletes the candidates ks, checking the cutoff again.
func (s statements) deleteSwept(ks [][]any, ret, ck, from float64) (string, []any) {
	args := make([]any, 0, len(ks)*(s.nPK+1)+3)
	for _, k := range ks {
		args = append(args, k...)
	}
	args = append(args, ret, ck, from)
	tuple := "(" + s.pkList + ", " + s.eventID + ")"
	return "DELETE FROM " + s.table + " WHERE " + tuple + " IN (" + placeholders(len(ks), s.nPK+1) + ") AND " + s.cutoffSQL(), args
}
