package checkpoint

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/sqlident"
)

// LayoutColumn is one column of an outbox table as information_schema.COLUMNS gives it: its
// COLUMN_NAME and COLUMN_TYPE ("varchar(64)", "int(10) unsigned"). Its ordinal is its index in
// the table's layout plus one.
type LayoutColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Layouts are the outbox tables' column layouts ("schema.table" to its columns in ordinal order)
// under which the binlog after the checkpoint's position is to be read. Without FULL row
// metadata a row carries no column names, so it is mapped by position onto the layout: a
// layout that changed while outboxd was away would map rows written before the change onto
// the wrong columns. A table with no columns (empty, not absent) is one whose layout could not
// be read after a DDL statement: unknown, so it matches nothing. A nil Layouts was never
// recorded (a checkpoint of an older outboxd, or `checkpoint set` without --accept-layout).
type Layouts map[string][]LayoutColumn

// Clone returns a copy that shares nothing with l (the column slices are never modified in
// place, so they are shared). Pure.
func (l Layouts) Clone() Layouts {
	if l == nil {
		return nil
	}
	c := make(Layouts, len(l))
	for k, v := range l {
		c[k] = v
	}
	return c
}

// LayoutDiff describes how the layout now differs from was, for an operator: the columns
// dropped, added and retyped, and how the order of the columns both have changed, such as
// "columns 2 and 3 swapped: was event_id, biz_key; now biz_key, event_id". It returns "" when
// they are the same. Column names are compared case-insensitively, as MySQL does. Pure.
func LayoutDiff(was, now []LayoutColumn) string {
	if slices.Equal(was, now) {
		return ""
	}
	if len(was) == 0 {
		return "its layout at the checkpoint is unknown (it could not be read after a DDL statement on the table)"
	}
	if len(now) == 0 {
		return "it has no columns now (dropped?)"
	}
	wasAt, nowAt := ordinals(was), ordinals(now)
	var changes []string
	for i, c := range was {
		if _, ok := nowAt[strings.ToLower(c.Name)]; !ok {
			changes = append(changes, fmt.Sprintf("column %d %s %s dropped", i+1, c.Name, c.Type))
		}
	}
	for i, c := range now {
		j, ok := wasAt[strings.ToLower(c.Name)]
		switch {
		case !ok:
			changes = append(changes, fmt.Sprintf("column %d %s %s added", i+1, c.Name, c.Type))
		case !strings.EqualFold(was[j].Type, c.Type):
			changes = append(changes, fmt.Sprintf("column %s retyped: was %s, now %s", c.Name, was[j].Type, c.Type))
		}
	}
	// The columns both layouts have, in each one's order: any difference is a move.
	var wasOrder, nowOrder []string
	for _, c := range was {
		if _, ok := nowAt[strings.ToLower(c.Name)]; ok {
			wasOrder = append(wasOrder, c.Name)
		}
	}
	for _, c := range now {
		if _, ok := wasAt[strings.ToLower(c.Name)]; ok {
			nowOrder = append(nowOrder, c.Name)
		}
	}
	first, last := -1, -1
	for i := range nowOrder {
		if !strings.EqualFold(wasOrder[i], nowOrder[i]) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first >= 0 {
		w, n := wasOrder[first:last+1], nowOrder[first:last+1]
		// Ordinals are the columns' positions now.
		from, to := nowAt[strings.ToLower(n[0])]+1, nowAt[strings.ToLower(n[len(n)-1])]+1
		if len(n) == 2 {
			changes = append(changes, fmt.Sprintf("columns %d and %d swapped: was %s; now %s", from, to, strings.Join(w, ", "), strings.Join(n, ", ")))
		} else {
			changes = append(changes, fmt.Sprintf("columns %d to %d reordered: was %s; now %s", from, to, strings.Join(w, ", "), strings.Join(n, ", ")))
		}
	}
	if len(changes) == 0 { // only the case of a name changed
		return fmt.Sprintf("column names changed case: was %s; now %s", names(was), names(now))
	}
	return strings.Join(changes, "; ")
}

// ordinals maps each column's lower-case name to its index.
func ordinals(cols []LayoutColumn) map[string]int {
	m := make(map[string]int, len(cols))
	for i, c := range cols {
		m[strings.ToLower(c.Name)] = i
	}
	return m
}

func names(cols []LayoutColumn) string {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = c.Name
	}
	return strings.Join(s, ", ")
}

// encodeLayouts is the mysql store's layouts column: JSON, or NULL when not recorded.
func encodeLayouts(l Layouts) any {
	if l == nil {
		return nil
	}
	b, _ := json.Marshal(l) // a map of string slices always encodes
	return string(b)
}

func decodeLayouts(v sql.NullString) (Layouts, error) {
	if !v.Valid {
		return nil, nil
	}
	var l Layouts
	if err := json.Unmarshal([]byte(v.String), &l); err != nil {
		return nil, fmt.Errorf("layouts %q: %w", v.String, err)
	}
	return l, nil
}

// addedColumns are the mysql store's columns added after its first release, by name: their
// definitions in an ALTER TABLE ... ADD COLUMN.
var addedColumns = map[string]string{
	MarkColumn: MarkColumn + " DATETIME(6) NULL",
	"layouts":  "layouts TEXT NULL",
	"scope":    "scope TEXT NULL",
}

// AddColumnSQL is the ALTER TABLE that adds column, one of the mysql store's columns added
// after its first release, to an existing checkpoint table; "" for any other column. Pure.
func AddColumnSQL(table, column string) string {
	def, ok := addedColumns[column]
	if !ok {
		return ""
	}
	schema, name, _ := strings.Cut(table, ".")
	return "ALTER TABLE " + sqlident.Table(schema, name) + " ADD COLUMN " + def
}
