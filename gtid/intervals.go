package gtid

import (
	"cmp"
	"slices"
	"sort"
)

// normalize sorts ivs by start and merges overlapping and adjacent intervals ({1,4} and {4,6}
// are 1-3 and 4-5, one run 1-5), the form String prints and Equal compares. It reuses ivs'
// storage; the result is nil only for a nil ivs.
func normalize(ivs []Interval) []Interval {
	if len(ivs) < 2 {
		return ivs
	}
	slices.SortFunc(ivs, func(a, b Interval) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Stop, b.Stop))
	})
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		last := &out[len(out)-1]
		if iv.Start > last.Stop {
			out = append(out, iv)
			continue
		}
		last.Stop = max(last.Stop, iv.Stop)
	}
	return out
}

// containsIntervals reports whether every interval of sub lies in set; both are normalized, so
// an interval of sub is in set only if it is inside one interval of set.
func containsIntervals(set, sub []Interval) bool {
	for _, iv := range sub {
		// Stops ascend in a normalized list: the first interval ending at or after iv's end is
		// the only one that can hold it.
		j := sort.Search(len(set), func(j int) bool { return set[j].Stop >= iv.Stop })
		if j == len(set) || set[j].Start > iv.Start {
			return false
		}
	}
	return true
}

// subtractIntervals returns a minus b; both must be normalized, as is the result.
func subtractIntervals(a, b []Interval) []Interval {
	out := []Interval{}
	j := 0
	for _, iv := range a {
		cur := iv.Start
		for j < len(b) && b[j].Stop <= cur {
			j++
		}
		for k := j; k < len(b) && b[k].Start < iv.Stop && cur < iv.Stop; k++ {
			if b[k].Start > cur {
				out = append(out, Interval{Start: cur, Stop: b[k].Start})
			}
			cur = max(cur, b[k].Stop)
		}
		if cur < iv.Stop {
			out = append(out, Interval{Start: cur, Stop: iv.Stop})
		}
	}
	return out
}
