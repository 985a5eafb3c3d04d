package cleanup

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/sqlident"
)

// statements builds one table's SQL. Identifiers are quoted once, at New.
type statements struct {
	table, pkList, eventID, createdAt, label string
	nPK                                      int
	pk                                       []string // quoted key columns
	orderBy                                  string
	oldest                                   string
	// minCreated selects the oldest created_at as unix seconds (NULL for an empty table).
	minCreated string
	// wall turns an instant into created_at's terms (a DATETIME's zone); identity otherwise.
	wall func(instant string) string
}

func newStatements(t Table) statements {
	cols := make([]string, len(t.PK))
	for i, c := range t.PK {
		cols[i] = sqlident.Quote(c)
	}
	s := statements{
		table: sqlident.Table(t.Schema, t.Name), pkList: strings.Join(cols, ", "),
		eventID: sqlident.Quote(t.EventID), nPK: len(t.PK), pk: cols, label: t.Schema + "." + t.Name,
	}
	s.orderBy = s.pkList
	if t.Settings.CreatedAt != "" {
		s.createdAt = sqlident.Quote(t.Settings.CreatedAt)
		s.wall = func(instant string) string { return instant }
		instant := func(wall string) string { return wall }
		if t.CreatedAtDatetime {
			// A DATETIME is wall-clock time of the zone the application writes it in. An
			// unknown zone gives NULL: the sweep then looks at nothing.
			tz := "'" + strings.ReplaceAll(t.Settings.TimeZone, "'", "''") + "'"
			s.wall = func(instant string) string { return "CONVERT_TZ(" + instant + ", @@session.time_zone, " + tz + ")" }
			instant = func(wall string) string { return "CONVERT_TZ(" + wall + ", " + tz + ", @@session.time_zone)" }
		}
		s.oldest = fmt.Sprintf("SELECT TIMESTAMPDIFF(MICROSECOND, %s, %s) / 1e6 FROM %s ORDER BY %s LIMIT 1", s.createdAt, s.wall("NOW(6)"), s.table, s.orderBy)
		s.minCreated = fmt.Sprintf("SELECT UNIX_TIMESTAMP(%s) FROM %s", instant("MIN("+s.createdAt+")"), s.table)
	}
	return s
}

// placeholders is "(?, ?), (?, ?)" for n tuples of the given elements.
func placeholders(n int, elems ...string) string {
	one := "(" + strings.Join(elems, ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

// deleteRows is one DELETE of the rows with the given primary keys and event ids (eventIDs[i]
// is keys[i]'s). The key tuple IN list is what MariaDB and MySQL resolve as a range on the
// primary key; the event id is matched too, as bytes (BINARY: a case- or accent-insensitive
// collation, or trailing spaces, must not let another id pass), so that a key reused by a
// later row is never taken for the one proven.
func (s statements) deleteRows(keys [][]any, eventIDs []string) (string, []any) {
	ph := slices.Repeat([]string{"?"}, s.nPK)
	args := make([]any, 0, 2*len(keys)*(s.nPK+1))
	for _, k := range keys {
		args = append(args, k...)
	}
	for i, k := range keys {
		args = append(args, k...)
		args = append(args, eventIDs[i])
	}
	// Also when the event id is a key column: the key compares under its collation.
	return "DELETE FROM " + s.table + " WHERE (" + s.pkList + ") IN (" + placeholders(len(keys), ph...) + ")" +
		" AND (" + s.pkList + ", BINARY " + s.eventID + ") IN (" + placeholders(len(keys), append(ph, "BINARY ?")...) + ")", args
}

// deleteKeys is deleteRows for the key path's keys.
func (s statements) deleteKeys(ks []key) (string, []any) {
	keys := make([][]any, len(ks))
	ids := make([]string, len(ks))
	for i, k := range ks {
		keys[i], ids[i] = k.vals, k.eventID
	}
	return s.deleteRows(keys, ids)
}
