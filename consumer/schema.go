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

// CreateTables creates k's tables if they do not exist, adds the handler column to a quarantine
// table of an older kit (QuarantineMigrationSQL: a nullable column appended, which MySQL 8.0.12+
// and MariaDB 10.3+ add in place, without copying the table), then verifies the dedup table's
// shape (VerifyTables): a dedup table of an older kit is refused with ErrOldDedupTable, not
// altered, since its migration changes the primary key of a large table, the operator's to
// schedule. It blocks on the statements; the ones before a failing statement stay (DDL commits
// implicitly).
func (k *Kit) CreateTables(ctx context.Context) error {
	for _, stmt := range k.DDL() {
		if _, err := k.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("consumer: create tables: %w", err)
		}
	}
	has, err := k.columnExists(ctx, k.quarantineName, "handler")
	if err != nil {
		return fmt.Errorf("consumer: read the columns of %s: %w", k.quarantine, err)
	}
	if !has {
		for _, stmt := range k.QuarantineMigrationSQL() {
			if _, err := k.db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("consumer: add the handler column to %s: %w", k.quarantine, err)
			}
		}
	}
	return k.VerifyTables(ctx)
}

// QuarantineMigrationSQL returns the statement that gives a quarantine table of an older kit its
// handler column (NULL in the rows it holds). CreateTables runs it when the column is missing;
// until then Handle quarantines without the handler. Pure.
func (k *Kit) QuarantineMigrationSQL() []string {
	return []string{"ALTER TABLE " + k.quarantine + " ADD COLUMN handler VARBINARY(64) NULL"}
}

// columnExists reports whether table (name as configured, "table" or "schema.table") has column.
func (k *Kit) columnExists(ctx context.Context, name, column string) (bool, error) {
	sch, table := splitName(name)
	var n int
	err := k.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?`, sch, table, column).Scan(&n)
	return n > 0, err
}

// splitName splits a configured table name into its schema (nil: the connection's database)
// and table, for information_schema queries.
func splitName(name string) (schema any, table string) {
	s, t, qualified := strings.Cut(name, ".")
	if !qualified {
		return nil, s
	}
	return s, t
}

// ErrOldDedupTable is returned (wrapped, with the statements to run) for a dedup table of the
// kit before the handler was part of its key: PRIMARY KEY (event_id), no handler column.
var ErrOldDedupTable = errors.New("consumer: the dedup table has no handler column in its primary key")

// VerifyTables checks that the dedup table's primary key is (handler, event_id). A table of an
// older kit gives ErrOldDedupTable with MigrationSQL in the message. It blocks on one query and
// is safe for concurrent use.
func (k *Kit) VerifyTables(ctx context.Context) error {
	sch, table := splitName(k.dedupName)
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
