package cleanup

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// liveDB starts a throwaway MariaDB for one test and returns a pool on it, closed at the end.
func liveDB(t *testing.T) *sql.DB {
	t.Helper()
	s := mariadb.StartT(t, mariadb.Options{})
	db, err := s.DB(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
