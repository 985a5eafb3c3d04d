package sqlerr

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/checkpoint"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read the server's GTID position: %w", mysqldriver.ErrInvalidConn), true},
		{fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{fmt.Errorf("load: %w", checkpoint.ErrUnreachable), true},
		{&mysqldriver.MySQLError{Number: 1927, Message: "Connection was killed"}, true},
		{&mysqldriver.MySQLError{Number: 1146, Message: "Table doesn't exist"}, false},
		{fmt.Errorf("%w: checkpoint names transactions", errors.New("the checkpoint is ahead of the server")), false},
		{errors.New("checkpoint is for flavor mysql"), false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestAnsweredAndLoginRefused(t *testing.T) {
	denied := fmt.Errorf("open: %w", &mysqldriver.MySQLError{Number: 1045, Message: "Access denied"})
	if !Answered(denied) || !LoginRefused(denied) {
		t.Errorf("ERROR 1045 not read as an answer that refuses the login")
	}
	shutdown := &mysqldriver.MySQLError{Number: 1053, Message: "Server shutdown in progress"}
	if !Answered(shutdown) || LoginRefused(shutdown) {
		t.Errorf("ERROR 1053 not read as an answer other than a refused login")
	}
	if Answered(mysqldriver.ErrInvalidConn) || LoginRefused(mysqldriver.ErrInvalidConn) {
		t.Errorf("a broken connection read as an answer")
	}
}
