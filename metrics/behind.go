package metrics

import (
	"fmt"

	"github.com/outboxd/outboxd/gtid"
)

// CountBehind returns how many transactions server holds that acked does not: for MariaDB the
// sum over the server's domains of the sequence-number difference (a domain acked lacks counts
// from 0), for MySQL the size of server minus acked. It is cheap enough for a periodic sample,
// not for every event. Pure; safe for concurrent use. It errs only when the flavors differ.
func CountBehind(server, acked gtid.Set) (int64, error) {
	if server.Flavor() != acked.Flavor() {
		return 0, fmt.Errorf("count transactions behind: server set is %s, acknowledged set is %s", server.Flavor(), acked.Flavor())
	}
	if server.Flavor() == gtid.MariaDB {
		var n int64
		for _, p := range server.Positions() {
			if a, _ := acked.Position(p.Domain); p.Seq > a.Seq {
				n += int64(p.Seq - a.Seq)
			}
		}
		return n, nil
	}
	return int64(server.Subtract(acked).Count()), nil
}
