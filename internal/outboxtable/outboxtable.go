// Package outboxtable is the one definition of the suggested outbox table: the DDL that the demo
// shop, bench, deploy/mysql/init.sql and the README create, and the column types `outboxd check`
// expects for each configured column role. deploy/mysql/init.sql and the README hold copies of
// DDL's text; TestDocsCopies keeps them equal.
package outboxtable

import (
	"fmt"
	"strings"
)

// Column is one column of the suggested table.
type Column struct {
	// Name is the column's name in the suggested table (the config's default for Role).
	Name string
	// Role is the config's columns.<role> key the column fills; "" for the id.
	Role string
	// Type is the SQL type ("VARCHAR(64)"); Attrs the rest of the definition ("NOT NULL").
	Type, Attrs string
}

// Definition is the column definition after the name: "VARCHAR(64) NOT NULL". Pure.
func (c Column) Definition() string { return strings.TrimSpace(c.Type + " " + c.Attrs) }

// columns in table order. Changing one changes what `outboxd check` expects of every configured
// outbox table, so it is a change of behaviour, not of layout.
var columns = []Column{
	{Name: "id", Type: "BIGINT PRIMARY KEY AUTO_INCREMENT"},
	{Name: "event_id", Role: "event_id", Type: "VARCHAR(64)", Attrs: "NOT NULL"},
	{Name: "biz_key", Role: "key", Type: "VARCHAR(64)", Attrs: "NOT NULL"},
	{Name: "topic", Role: "topic", Type: "VARCHAR(128)", Attrs: "NOT NULL"},
	{Name: "event_type", Role: "event_type", Type: "VARCHAR(64)", Attrs: "NULL"},
	{Name: "payload", Role: "payload", Type: "JSON", Attrs: "NOT NULL"},
	{Name: "headers", Role: "headers", Type: "JSON", Attrs: "NULL"},
	{Name: "created_at", Role: "created_at", Type: "DATETIME(6)", Attrs: "NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"},
}

// uniqueKey makes a second row with the same event_id fail in the application's transaction.
const uniqueKey = "UNIQUE KEY uk_event_id (event_id)"

// Columns returns the suggested table's columns in table order, a fresh slice. Pure.
func Columns() []Column { return append([]Column(nil), columns...) }

// Type returns the column definition `outboxd check` expects for a column role ("event_id",
// "key", "topic", "payload", "event_type", "headers", "created_at"), "" for any other. Pure.
func Type(role string) string {
	for _, c := range columns {
		if c.Role != "" && c.Role == role {
			return c.Definition()
		}
	}
	return ""
}

// DDL returns the CREATE TABLE statement of the suggested outbox table named table, written into
// the statement as given ("outbox_event", "shop.outbox_event"): the caller quotes it if needed.
// No trailing semicolon. Pure.
func DDL(table string) string { return create("CREATE TABLE ", table) }

// DDLIfNotExists is DDL with CREATE TABLE IF NOT EXISTS, for a tool that reruns on a database
// that may have the table. Pure.
func DDLIfNotExists(table string) string { return create("CREATE TABLE IF NOT EXISTS ", table) }

func create(verb, table string) string {
	var b strings.Builder
	b.WriteString(verb + table + " (\n")
	for _, c := range columns {
		if c.Attrs == "" {
			fmt.Fprintf(&b, "  %-10s %s,\n", c.Name, c.Type)
			continue
		}
		fmt.Fprintf(&b, "  %-10s %-12s %s,\n", c.Name, c.Type, c.Attrs)
	}
	b.WriteString("  " + uniqueKey + "\n)")
	return b.String()
}
