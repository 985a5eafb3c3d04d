package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{fmt.Errorf("dial: %w", io.ErrUnexpectedEOF), ErrUnreachable},
		{mysqldriver.ErrInvalidConn, ErrUnreachable},
		{&mysqldriver.MySQLError{Number: 1053}, ErrUnreachable},
		{&mysqldriver.MySQLError{Number: 1927}, ErrUnreachable},
		{&mysqldriver.MySQLError{Number: 1205}, nil},
		{&mysqldriver.MySQLError{Number: 1213}, nil},
		{&mysqldriver.MySQLError{Number: 1146}, ErrStoreMisconfigured},
		{&mysqldriver.MySQLError{Number: 1142}, ErrStoreMisconfigured},
		{&mysqldriver.MySQLError{Number: 1290}, ErrStoreMisconfigured},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestWrapNamesTheFix(t *testing.T) {
	s := &MySQLStore{cfg: MySQLConfig{Table: "outboxd.checkpoint", Name: "relay", Addr: "db:3306"}}
	err := s.wrap("save", &mysqldriver.MySQLError{Number: 1146, Message: "Table 'outboxd.checkpoint' doesn't exist"})
	if !errors.Is(err, ErrStoreMisconfigured) || !strings.Contains(err.Error(), "CREATE TABLE `outboxd`.`checkpoint`") {
		t.Errorf("missing table: %v", err)
	}
	err = s.wrap("save", &mysqldriver.MySQLError{Number: 1142, Message: "UPDATE command denied"})
	if !strings.Contains(err.Error(), "GRANT SELECT, INSERT, UPDATE ON `outboxd`.`checkpoint`") {
		t.Errorf("denied: %v", err)
	}
	err = s.wrap("save", mysqldriver.ErrInvalidConn)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, mysqldriver.ErrInvalidConn) {
		t.Errorf("unreachable: %v", err)
	}
}

func TestDDLHasEveryColumn(t *testing.T) {
	ddl := CreateTableSQL("a.b")
	for _, c := range MySQLColumns {
		if !strings.Contains(ddl, "\n  "+c+" ") {
			t.Errorf("DDL lacks column %s:\n%s", c, ddl)
		}
	}
	if g := GrantSQL("a.b`c", "'u'@'%'"); g != "GRANT SELECT, INSERT, UPDATE ON `a`.`b``c` TO 'u'@'%'" {
		t.Errorf("GrantSQL = %s", g)
	}
}
