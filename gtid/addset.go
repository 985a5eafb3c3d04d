package gtid

import (
	"fmt"
	"slices"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// AddSet adds every GTID of o to s, as if o's transactions were added with Add after s's: for
// MySQL the union; for MariaDB o's position replaces s's in each domain o has. o is not changed
// and shares no storage with s afterwards. On error (different flavors, an uninitialised set) s
// is unchanged.
func (s *Set) AddSet(o Set) error {
	if o.IsEmpty() {
		return nil
	}
	if s.flavor != o.flavor || s.s == nil {
		return fmt.Errorf("gtid: add a %s set to a %s set", o.flavor, s.flavor)
	}
	switch m := s.s.(type) {
	case *mysql.MysqlGTIDSet:
		for u, tags := range *o.mysqlSet() {
			if (*m)[u] == nil {
				(*m)[u] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			for tag, ivs := range tags {
				(*m)[u][tag] = append(slices.Clone((*m)[u][tag]), ivs...).Normalize()
			}
		}
	case *mysql.MariadbGTIDSet:
		for d, g := range o.mariaSet().Sets {
			c := *g
			m.Sets[d] = &c
		}
	}
	return nil
}
