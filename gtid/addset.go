package gtid

import (
	"fmt"
	"slices"
)

// AddSet adds every GTID of o to s, as if o's transactions were added with Add after s's: for
// MySQL the union; for MariaDB o's position replaces s's in each domain o has. o is not changed
// and shares no storage with s afterwards. On error (different flavors, an uninitialised set) s
// is unchanged.
func (s *Set) AddSet(o Set) error {
	if o.IsEmpty() {
		return nil
	}
	if s.flavor != o.flavor || (s.my == nil && s.ma == nil) {
		return fmt.Errorf("gtid: add a %s set to a %s set", o.flavor, s.flavor)
	}
	for u, otags := range o.my {
		if s.my[u] == nil {
			s.my[u] = map[string][]Interval{}
		}
		for tag, ivs := range otags {
			s.my[u][tag] = normalize(slices.Concat(s.my[u][tag], ivs))
		}
	}
	for d, p := range o.ma {
		s.ma[d] = p
	}
	return nil
}
