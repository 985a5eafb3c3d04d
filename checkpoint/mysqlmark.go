package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// MarkColumn is the checkpoint table's column for the periodic reconcile's mark.
const MarkColumn = "reconciled_through"

// LoadMark reads the row's reconcile mark; false when the row or the mark is not there yet. It
// blocks on one query (bounded by ctx and MySQLTimeout).
func (s *MySQLStore) LoadMark(ctx context.Context) (time.Time, bool, error) {
	if err := s.open(); err != nil {
		return time.Time{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	var v sql.NullString
	err := s.cfg.DB.QueryRowContext(ctx, "SELECT "+MarkColumn+" FROM "+s.quote+" WHERE name = ?", s.cfg.Name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !v.Valid {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, s.wrap("load the reconcile mark", err)
	}
	t, err := time.Parse(timeLayout, v.String)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: corrupt row: %s %q: %w", s.where(), MarkColumn, v.String, err)
	}
	return t, true, nil
}

// SaveMark writes the row's reconcile mark, fenced like Save: a process whose token (epoch,
// holder) is no longer the row's changes nothing and gets ErrSuperseded, so a deposed leader
// cannot move the mark past rows its successor has not checked. It blocks on at most two
// statements (bounded by ctx and MySQLTimeout); on error the row holds the previous mark.
func (s *MySQLStore) SaveMark(ctx context.Context, t time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	epoch, holder := s.token()
	res, err := s.cfg.DB.ExecContext(ctx, "UPDATE "+s.quote+" SET "+MarkColumn+" = ? WHERE name = ? AND epoch = ? AND holder = ?",
		t.UTC().Format(timeLayout), s.cfg.Name, epoch, holder)
	if err != nil {
		return s.wrap("save the reconcile mark", err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	return s.unchanged(ctx, "save the reconcile mark", epoch, holder, nil)
}
