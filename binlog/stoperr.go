package binlog

import (
	"errors"
	"strings"
)

// StopError stops the stream until the operator changes something: a transaction outboxd
// cannot read (a statement-logged or partial row, a row of an altered table), or a server that
// refuses the stream. Error() is the short problem (table, transaction, what is wrong); Fix says
// what to change and is logged as its own field (fix) where the error ends the run, so the
// error line stays readable and the advice is not wrapped into it twice.
type StopError struct {
	Table   string // schema.table of the outbox table, "" when the stop is not about one
	GTID    string // the transaction's GTID, "" when none or not known yet
	Setting string // the server setting or config key at fault, such as binlog_row_image
	Problem string // what is wrong, without the table
	Fix     string // what to change, a sentence for the operator
	// Err is wrapped: a sentinel callers branch on with errors.Is, or the server's error.
	Err error
}

// Error returns "outbox table T: problem: err", leaving out the parts that are empty.
func (e *StopError) Error() string {
	var parts []string
	if e.Problem != "" {
		parts = append(parts, e.Problem)
	}
	if e.Err != nil {
		parts = append(parts, e.Err.Error())
	}
	s := strings.Join(parts, ": ")
	if e.Table != "" {
		s = "outbox table " + e.Table + ": " + s
	}
	return s
}

// Unwrap returns Err, so errors.Is finds the sentinels it wraps.
func (e *StopError) Unwrap() error { return e.Err }

// FixOf returns the Fix of the first StopError in err's chain, "" when there is none.
func FixOf(err error) string {
	var se *StopError
	if errors.As(err, &se) {
		return se.Fix
	}
	return ""
}
