package daemon

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/startpos"
)

func TestTransientSQL(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read the server's GTID position: %w", mysqldriver.ErrInvalidConn), true},
		{fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{fmt.Errorf("load: %w", checkpoint.ErrUnreachable), true},
		{&mysqldriver.MySQLError{Number: 1927, Message: "Connection was killed"}, true},
		{&mysqldriver.MySQLError{Number: 1146, Message: "Table doesn't exist"}, false},
		{fmt.Errorf("%w: checkpoint names transactions", startpos.ErrAhead), false},
		{errors.New("checkpoint is for flavor mysql"), false},
	} {
		if got := transientSQL(c.err); got != c.want {
			t.Errorf("transientSQL(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
