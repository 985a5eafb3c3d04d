// Package sqlident quotes MySQL/MariaDB identifiers for SQL that outboxd builds from configured
// names. Every statement outboxd writes quotes names this one way, so a name with a backtick in
// it can neither break a statement nor inject into one.
package sqlident

import "strings"

// Quote returns name as a backtick-quoted identifier, each backtick in it doubled, as the server
// reads it back. It does not split on "."; use Table for a qualified name. Pure.
func Quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Table returns the qualified table name `schema`.`name`, each part quoted by Quote. Pure.
func Table(schema, name string) string { return Quote(schema) + "." + Quote(name) }
