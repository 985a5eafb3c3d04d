package gtid

import "fmt"

// ContainsGTID reports whether one transaction's GTID is in s, for the MySQL flavor ("uuid:N",
// "uuid:tag:N"): the binlog reader's check that a transaction the server streams is one the
// start set already covers. It does not block or allocate a set, and may run concurrently with
// other reads of s.
//
// A MariaDB position is not a set of transactions: it holds one GTID per domain, and with
// gtid_strict_mode off a later transaction may carry a lower sequence number, so whether a
// position covers a GTID cannot be read off the position. For MariaDB, ContainsGTID reports only
// whether g is exactly its domain's position. It returns an error for a malformed g.
func (s Set) ContainsGTID(g string) (bool, error) {
	switch {
	case s.my != nil:
		u, tag, gno, err := parseMySQLGTID(g)
		if err != nil {
			return false, fmt.Errorf("gtid: mysql GTID %q: %w", g, err)
		}
		return containsIntervals(s.my[u][tag], []Interval{{gno, gno + 1}}), nil
	case s.ma != nil:
		mg, err := parseMariaDBGTID(g)
		if err != nil {
			return false, fmt.Errorf("gtid: mariadb GTID %q: %w", g, err)
		}
		p, ok := s.ma[mg.Domain]
		return ok && p == mg, nil
	}
	return false, fmt.Errorf("gtid: look up %q in an uninitialised set of flavor %q: use gtid.Parse or gtid.Empty", g, s.flavor)
}
