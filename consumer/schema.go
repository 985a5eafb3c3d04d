package consumer

import (
	"context"
	_ "embed"
	"errors"
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

// CreateTables creates k's tables if they do not exist, then verifies the dedup table's shape
// (VerifyTables): an existing table of an older kit is refused with ErrOldDedupTable, not
// altered, since an ALTER of a large table is the operator's to schedule. It blocks on the
// statements; the ones before a failing statement stay (DDL commits implicitly).
func (k *Kit) CreateTables(ctx context.Context) error {
	for _, stmt := range k.DDL() {
		if _, err := k.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("consumer: create tables: %w", err)
		}
	}
	return k.VerifyTables(ctx)
}

// ErrOldDedupTable is returned (wrapped, with the statements to run) for a dedup table of the
// kit before the handler was part of its key: PRIMARY KEY (event_id), no handler column.
var ErrOldDedupTable = errors.New("consumer: the dedup table has no handler column in its primary key")

// VerifyTables checks that the dedup table's primary key is (handler, event_id). A table of an
// older kit gives ErrOldDedupTable with MigrationSQL in the message. It blocks on one query and
// is safe for concurrent use.
func (k *Kit) VerifyTables(ctx context.Context) error {
	schema, table, qualified := strings.Cut(k.dedupName, ".")
	var sch any = schema
	if !qualified {
		sch, table = nil, schema
	}
	rows, err := k.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION`, sch, table)
	if err != nil {
		return fmt.Errorf("consumer: read the primary key of %s: %w", k.dedup, err)
	}
	defer rows.Close()
	var pk []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return fmt.Errorf("consumer: read the primary key of %s: %w", k.dedup, err)
		}
		pk = append(pk, strings.ToLower(c))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("consumer: read the primary key of %s: %w", k.dedup, err)
	}
	switch strings.Join(pk, ",") {
	case "handler,event_id":
		return nil
	case "event_id":
		return k.oldTable(nil)
	case "":
		return fmt.Errorf("consumer: dedup table %s not found (or without a primary key): create it with Kit.CreateTables (consumer/schema.sql)", k.dedup)
	}
	return fmt.Errorf("consumer: dedup table %s has the primary key (%s); the kit needs (handler, event_id) (consumer/schema.sql)", k.dedup, strings.Join(pk, ", "))
}

// MigrationSQL returns the statements that turn a dedup table of an older kit (PRIMARY KEY
// (event_id)) into the current one, with its existing marks assigned to k's handler: run them
// once, for the handler that has used the table. Pure.
func (k *Kit) MigrationSQL() []string {
	return []string{
		"ALTER TABLE " + k.dedup + " ADD COLUMN handler VARBINARY(64) NOT NULL DEFAULT '" + k.handler + "' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (handler, event_id)",
		"ALTER TABLE " + k.dedup + " ALTER COLUMN handler DROP DEFAULT",
	}
}

// oldTable is ErrOldDedupTable with the statements to run; cause is the server's error, if any.
func (k *Kit) oldTable(cause error) error {
	why := ""
	if cause != nil {
		why = " (" + cause.Error() + ")"
	}
	return fmt.Errorf("%w: %s%s; migrate it, assigning its marks to handler %q: %s; "+
		"if several handlers shared it, their marks cannot be told apart: the events the others skipped as duplicates need a replay",
		ErrOldDedupTable, k.dedup, why, k.handler, strings.Join(k.MigrationSQL(), "; "))
}
