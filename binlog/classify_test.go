package binlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The server errors the reader turns into operator decisions, as MariaDB 10.11 sends them.
func TestClassifyServerErrors(t *testing.T) {
	r := &Reader{cfg: Config{Addr: "db:3306", User: "ob", ServerID: 4711}}
	cases := []struct {
		err          *mysql.MyError
		want         error
		disconnected bool
		mention      string
	}{
		{&mysql.MyError{Code: 4052, Message: "A slave with the same server_uuid/server_id is already connected; the first event '.' at 0"},
			ErrServerIDInUse, true, "server_id 4711"},
		{&mysql.MyError{Code: 1236, Message: "A slave with the same server_uuid/server_id as this slave has connected to the master"},
			ErrServerIDInUse, true, "server_id 4711"},
		{&mysql.MyError{Code: 1236, Message: "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged."},
			ErrGTIDNotOnServer, false, "data loss"},
		{&mysql.MyError{Code: 1236, Message: "Error: connecting slave requested to start from GTID 0-1-99, which is not in the master's binlog"},
			ErrGTIDNotOnServer, false, "ahead of the server"},
	}
	for _, c := range cases {
		err := connErr(r.classify(c.err, "0-1-5"))
		if !errors.Is(err, c.want) || errors.Is(err, ErrDisconnected) != c.disconnected || !strings.Contains(err.Error()+" fix: "+FixOf(err), c.mention) {
			t.Errorf("%v: got %v (disconnected %v)", c.err, err, errors.Is(err, ErrDisconnected))
		}
	}
}
