// Package gtid parses, merges and formats GTID sets of both flavors: MySQL ("uuid:1-5:7", tagged
// "uuid:tag:3" of 8.3+) and MariaDB ("0-1-42,1-2-7", one position per domain).
//
// A Set wraps go-mysql's mysql.GTIDSet but does its own parsing and formatting: go-mysql sorts
// MariaDB domains as text ("10-…" before "2-…"), joins MySQL uuid sets with "," where the server
// prints ",\n", accepts signs and empty elements, and its errors do not name the bad part.
package gtid

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// Flavor is the server family.
type Flavor string

const (
	MySQL   Flavor = "mysql"
	MariaDB Flavor = "mariadb"
)

// Validate reports an error naming the accepted values when f is not a known flavor.
func (f Flavor) Validate() error {
	switch f {
	case MySQL, MariaDB:
		return nil
	}
	return fmt.Errorf("gtid: unknown flavor %q (want %q or %q)", string(f), MySQL, MariaDB)
}

// Set is a GTID set of one flavor. The zero value is not usable; use Parse or Empty.
// Not safe for concurrent mutation. Copies of a Set share storage: use Clone for an independent
// copy before mutating one of them with Add.
type Set struct {
	flavor Flavor
	s      mysql.GTIDSet
}

// Empty returns an empty set of the flavor. For an unknown flavor it returns a set that behaves
// like the zero Set (empty, and Add fails); Parse reports the unknown flavor as an error.
func Empty(f Flavor) Set {
	switch f {
	case MySQL:
		m := mysql.NewMysqlGTIDSet()
		return Set{flavor: f, s: &m}
	case MariaDB:
		return Set{flavor: f, s: &mysql.MariadbGTIDSet{Sets: map[uint32]*mysql.MariadbGTID{}}}
	}
	return Set{flavor: f}
}

// Parse parses s in the flavor's notation. An empty string is the empty set. Whitespace and
// newlines around elements are ignored, as in @@gtid_executed's output. It does not block; on
// error the returned Set is the zero Set and the error names the malformed part.
func Parse(f Flavor, s string) (Set, error) {
	if err := f.Validate(); err != nil {
		return Set{}, err
	}
	set := Empty(f)
	if strings.TrimSpace(s) == "" {
		return set, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		var err error
		switch f {
		case MySQL:
			err = parseMySQLPart(set.mysqlSet(), part)
		case MariaDB:
			err = parseMariaDBPart(set.mariaSet(), part)
		}
		if err != nil {
			return Set{}, fmt.Errorf("gtid: parse %s set %q: %w", f, s, err)
		}
	}
	if f == MySQL {
		for _, tags := range *set.mysqlSet() {
			for tag, ivs := range tags {
				tags[tag] = ivs.Normalize()
			}
		}
	}
	return set, nil
}

// Flavor reports the set's flavor.
func (s Set) Flavor() Flavor { return s.flavor }

// String formats the set as the server prints it (@@gtid_binlog_pos, @@gtid_executed):
// MariaDB domains in numeric order joined by ","; MySQL uuids in ascending order joined by ",\n",
// each uuid once, its untagged intervals first, then ":tag:intervals" per tag in tag order, all
// intervals merged. The empty set is "".
func (s Set) String() string {
	switch m := s.s.(type) {
	case *mysql.MysqlGTIDSet:
		return formatMySQL(*m)
	case *mysql.MariadbGTIDSet:
		return formatMariaDB(m)
	}
	return ""
}

// Clone returns an independent copy.
func (s Set) Clone() Set {
	if s.s == nil {
		return Set{flavor: s.flavor}
	}
	return Set{flavor: s.flavor, s: s.s.Clone()}
}

// Add records one transaction's GTID ("0-1-42", "uuid:7", "uuid:tag:3"). For MariaDB the GTID
// replaces the domain's position, as the server's binlog position does. On error s is unchanged.
func (s *Set) Add(gtid string) error {
	switch m := s.s.(type) {
	case *mysql.MysqlGTIDSet:
		u, tag, gno, err := parseMySQLGTID(gtid)
		if err != nil {
			return fmt.Errorf("gtid: add mysql GTID %q: %w", gtid, err)
		}
		m.AddGTIDWithTag(u, tag, gno)
		return nil
	case *mysql.MariadbGTIDSet:
		g, err := parseMariaDBGTID(gtid)
		if err != nil {
			return fmt.Errorf("gtid: add mariadb GTID %q: %w", gtid, err)
		}
		m.Sets[g.DomainID] = g
		return nil
	}
	return fmt.Errorf("gtid: add %q to an uninitialised set of flavor %q: use gtid.Parse or gtid.Empty", gtid, s.flavor)
}

// Contains reports whether every GTID of o is in s. For MariaDB: every domain of o is in s at a
// sequence number at least o's. Sets of different flavors contain each other only when o is empty.
func (s Set) Contains(o Set) bool {
	if o.IsEmpty() {
		return true
	}
	if s.s == nil || s.flavor != o.flavor {
		return false
	}
	return s.s.Contain(o.s)
}

// Equal reports whether s and o hold the same GTIDs. Two empty sets are equal whatever their
// flavors.
func (s Set) Equal(o Set) bool {
	if s.IsEmpty() || o.IsEmpty() {
		return s.IsEmpty() && o.IsEmpty()
	}
	if s.flavor != o.flavor {
		return false
	}
	return s.s.Equal(o.s)
}

// IsEmpty reports whether s holds no GTID.
func (s Set) IsEmpty() bool {
	switch m := s.s.(type) {
	case *mysql.MysqlGTIDSet:
		for _, tags := range *m {
			for _, ivs := range tags {
				if len(ivs) > 0 {
					return false
				}
			}
		}
		return true
	case *mysql.MariadbGTIDSet:
		return len(m.Sets) == 0
	}
	return true
}

// Native returns go-mysql's representation, for BinlogSyncer.StartSyncGTID. It is a copy,
// because the syncer mutates the set it is given as it streams. It is nil for the zero Set.
func (s Set) Native() mysql.GTIDSet {
	switch m := s.s.(type) {
	case *mysql.MysqlGTIDSet:
		c := m.Clone().(*mysql.MysqlGTIDSet)
		pruneMySQL(*c)
		return c
	case *mysql.MariadbGTIDSet:
		c := m.Clone().(*mysql.MariadbGTIDSet)
		// go-mysql prints the GTID 0-0-0 as "" and so would send a malformed position such as
		// ",1-2-3". Position 0 of domain 0 means "from the domain's beginning", which is also what
		// the server does for a domain the position omits.
		if g, ok := c.Sets[0]; ok && g.ServerID == 0 && g.SequenceNumber == 0 {
			delete(c.Sets, 0)
		}
		return c
	}
	return nil
}

// MissingSources lists the sources that other has and s lacks entirely: MariaDB domain ids, or
// MySQL "uuid" / "uuid:tag" prefixes. Starting from s would replay those sources from their
// beginning. The list is in String order; it is empty (nil) when nothing is missing. When the
// flavors differ every source of other is missing.
func (s Set) MissingSources(other Set) []string {
	var missing []string
	switch om := other.s.(type) {
	case *mysql.MysqlGTIDSet:
		sm, _ := s.s.(*mysql.MysqlGTIDSet)
		for _, u := range sortedUUIDs(*om) {
			for _, tag := range sortedTags(om, u) {
				if sm != nil && len((*sm)[u][tag]) > 0 {
					continue
				}
				src := u.String()
				if tag != (mysql.Tag{}) {
					src += ":" + tag.String()
				}
				missing = append(missing, src)
			}
		}
	case *mysql.MariadbGTIDSet:
		sm, _ := s.s.(*mysql.MariadbGTIDSet)
		for _, d := range sortedDomains(om) {
			if sm != nil {
				if _, ok := sm.Sets[d]; ok {
					continue
				}
			}
			missing = append(missing, strconv.FormatUint(uint64(d), 10))
		}
	}
	return missing
}

// Subtract returns the GTIDs in s that are not in o (MySQL). For MariaDB it returns, per domain,
// the position of s where o is behind s or lacks the domain. The result is independent of s and o;
// when the flavors differ it is a copy of s.
func (s Set) Subtract(o Set) Set {
	out := s.Clone()
	if s.flavor != o.flavor || o.s == nil {
		return out
	}
	switch m := out.s.(type) {
	case *mysql.MysqlGTIDSet:
		om := o.s.(*mysql.MysqlGTIDSet)
		for u, tags := range *m {
			for tag, ivs := range tags {
				tags[tag] = subtractIntervals(ivs, (*om)[u][tag])
			}
		}
		pruneMySQL(*m)
	case *mysql.MariadbGTIDSet:
		om := o.s.(*mysql.MariadbGTIDSet)
		for d, g := range m.Sets {
			if og, ok := om.Sets[d]; ok && og.SequenceNumber >= g.SequenceNumber {
				delete(m.Sets, d)
			}
		}
	}
	return out
}

// Count is the number of transactions a MySQL set names (the sum of its intervals' lengths);
// 0 for a MariaDB set, whose positions do not say how many transactions precede them. Pure.
func (s Set) Count() uint64 {
	m, ok := s.s.(*mysql.MysqlGTIDSet)
	if !ok {
		return 0
	}
	var n uint64
	for _, tags := range *m {
		for _, ivs := range tags {
			for _, iv := range ivs {
				n += uint64(iv.Stop - iv.Start)
			}
		}
	}
	return n
}

func (s Set) mysqlSet() *mysql.MysqlGTIDSet   { return s.s.(*mysql.MysqlGTIDSet) }
func (s Set) mariaSet() *mysql.MariadbGTIDSet { return s.s.(*mysql.MariadbGTIDSet) }

// parseMySQLPart adds one comma-separated element, "uuid[:tag]:interval[:interval|:tag:interval]...",
// to set. Intervals are appended unnormalised; Parse normalises once at the end.
func parseMySQLPart(set *mysql.MysqlGTIDSet, part string) error {
	p := strings.TrimSpace(part)
	if p == "" {
		return fmt.Errorf("empty element between commas")
	}
	elems := strings.Split(p, ":")
	u, err := parseUUID(elems[0])
	if err != nil {
		return fmt.Errorf("element %q: %w", p, err)
	}
	if len(elems) < 2 {
		return fmt.Errorf("element %q: uuid %s has no interval", p, u)
	}
	tags := (*set)[u]
	if tags == nil {
		tags = make(map[mysql.Tag]mysql.IntervalSlice, 1)
		(*set)[u] = tags
	}
	tag := mysql.Tag{}
	tagPending := false // a tag was read and no interval follows it yet
	for _, e := range elems[1:] {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			return fmt.Errorf("element %q: empty field between colons", p)
		case isTagStart(e[0]):
			if tagPending {
				return fmt.Errorf("element %q: tag %q has no interval", p, tag.String())
			}
			t, err := parseTag(e)
			if err != nil {
				return fmt.Errorf("element %q: %w", p, err)
			}
			tag, tagPending = t, true
		default:
			iv, err := parseInterval(e)
			if err != nil {
				return fmt.Errorf("element %q: %w", p, err)
			}
			tags[tag] = append(tags[tag], iv)
			tagPending = false
		}
	}
	if tagPending {
		return fmt.Errorf("element %q: tag %q has no interval", p, tag.String())
	}
	return nil
}

// parseMySQLGTID parses one transaction's GTID: "uuid:N" or "uuid:tag:N".
func parseMySQLGTID(s string) (uuid.UUID, mysql.Tag, int64, error) {
	elems := strings.Split(strings.TrimSpace(s), ":")
	if len(elems) != 2 && len(elems) != 3 {
		return uuid.UUID{}, mysql.Tag{}, 0, fmt.Errorf("want uuid:N or uuid:tag:N")
	}
	u, err := parseUUID(elems[0])
	if err != nil {
		return uuid.UUID{}, mysql.Tag{}, 0, err
	}
	tag := mysql.Tag{}
	if len(elems) == 3 {
		if tag, err = parseTag(strings.TrimSpace(elems[1])); err != nil {
			return uuid.UUID{}, mysql.Tag{}, 0, err
		}
	}
	gno, err := parseGNO(strings.TrimSpace(elems[len(elems)-1]))
	if err != nil {
		return uuid.UUID{}, mysql.Tag{}, 0, err
	}
	return u, tag, gno, nil
}

func parseUUID(s string) (uuid.UUID, error) {
	s = strings.TrimSpace(s)
	// uuid.Parse also accepts the 45-byte "urn:uuid:" form, which cannot reach here (it contains
	// colons); the 36-byte, 32-hex and braced forms it accepts are the ones MySQL accepts.
	u, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("bad uuid %q: %w", s, err)
	}
	return u, nil
}

func isTagStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// parseTag checks MySQL's tag syntax [a-zA-Z_][a-zA-Z0-9_]{0,31}; the server stores it lowercased.
func parseTag(s string) (mysql.Tag, error) {
	if len(s) == 0 || len(s) > 32 || !isTagStart(s[0]) {
		return mysql.Tag{}, fmt.Errorf("bad tag %q: want a letter or _ then up to 31 letters, digits or _", s)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isTagStart(c) && (c < '0' || c > '9') {
			return mysql.Tag{}, fmt.Errorf("bad tag %q: want a letter or _ then up to 31 letters, digits or _", s)
		}
	}
	return mysql.NewTag(s), nil
}

// parseInterval parses "N" or "N-M" (closed) into go-mysql's half-open Interval.
func parseInterval(s string) (mysql.Interval, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	start, err := parseGNO(strings.TrimSpace(lo))
	if err != nil {
		return mysql.Interval{}, fmt.Errorf("interval %q: %w", s, err)
	}
	end := start
	if isRange {
		if end, err = parseGNO(strings.TrimSpace(hi)); err != nil {
			return mysql.Interval{}, fmt.Errorf("interval %q: %w", s, err)
		}
		if end < start {
			return mysql.Interval{}, fmt.Errorf("interval %q: end %d is below start %d", s, end, start)
		}
	}
	return mysql.Interval{Start: start, Stop: end + 1}, nil
}

// parseGNO parses a transaction number: decimal digits only, 1 to 2^63-2 (the server's GNO_END
// is 2^63-1, exclusive, and the half-open Stop must fit in an int64).
func parseGNO(s string) (int64, error) {
	if !allDigits(s) {
		return 0, fmt.Errorf("bad transaction number %q: want decimal digits", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n >= math.MaxInt64 {
		return 0, fmt.Errorf("bad transaction number %q: want 1 to %d", s, int64(math.MaxInt64-1))
	}
	return n, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseMariaDBPart adds one "domain-server-seq" element to set. A second position for a domain
// already present is an error, as on the server: a position holds one GTID per domain.
func parseMariaDBPart(set *mysql.MariadbGTIDSet, part string) error {
	p := strings.TrimSpace(part)
	if p == "" {
		return fmt.Errorf("empty element between commas")
	}
	g, err := parseMariaDBGTID(p)
	if err != nil {
		return err
	}
	if prev, ok := set.Sets[g.DomainID]; ok {
		return fmt.Errorf("element %q: domain %d already has position %s", p, g.DomainID, formatMariaDBGTID(prev))
	}
	set.Sets[g.DomainID] = g
	return nil
}

func parseMariaDBGTID(s string) (*mysql.MariadbGTID, error) {
	s = strings.TrimSpace(s)
	f := strings.Split(s, "-")
	if len(f) != 3 {
		return nil, fmt.Errorf("element %q: want domain-server-sequence", s)
	}
	names := [3]string{"domain id", "server id", "sequence number"}
	bits := [3]int{32, 32, 64}
	var v [3]uint64
	for i := range f {
		if !allDigits(f[i]) {
			return nil, fmt.Errorf("element %q: bad %s %q: want decimal digits", s, names[i], f[i])
		}
		n, err := strconv.ParseUint(f[i], 10, bits[i])
		if err != nil {
			return nil, fmt.Errorf("element %q: bad %s %q: want at most %d bits", s, names[i], f[i], bits[i])
		}
		v[i] = n
	}
	return &mysql.MariadbGTID{DomainID: uint32(v[0]), ServerID: uint32(v[1]), SequenceNumber: v[2]}, nil
}

func formatMariaDBGTID(g *mysql.MariadbGTID) string {
	// Not g.String(): it prints 0-0-0 as "".
	return FormatMariaDB(g.DomainID, g.ServerID, g.SequenceNumber)
}

// FormatMariaDB formats one MariaDB GTID as the server prints it, "domain-server-seq", with one
// allocation (the binlog reader calls it per transaction). Pure.
func FormatMariaDB(domain, server uint32, seq uint64) string {
	var b [48]byte
	out := strconv.AppendUint(b[:0], uint64(domain), 10)
	out = append(out, '-')
	out = strconv.AppendUint(out, uint64(server), 10)
	out = append(out, '-')
	out = strconv.AppendUint(out, seq, 10)
	return string(out)
}

func formatMariaDB(m *mysql.MariadbGTIDSet) string {
	var sb strings.Builder
	for i, d := range sortedDomains(m) {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(formatMariaDBGTID(m.Sets[d]))
	}
	return sb.String()
}

func sortedDomains(m *mysql.MariadbGTIDSet) []uint32 {
	return slices.Sorted(maps.Keys(m.Sets))
}

// formatMySQL follows the server's Gtid_set::to_string with its default format: uuid sets
// separated by ",\n", a uuid written once followed by its (tag, intervals) groups in tag order.
func formatMySQL(m mysql.MysqlGTIDSet) string {
	var sb strings.Builder
	first := true
	for _, u := range sortedUUIDs(m) {
		tags := sortedTags(&m, u)
		if len(tags) == 0 {
			continue
		}
		if !first {
			sb.WriteString(",\n")
		}
		first = false
		sb.WriteString(u.String())
		for _, tag := range tags {
			if tag != (mysql.Tag{}) {
				sb.WriteByte(':')
				sb.WriteString(tag.String())
			}
			for _, iv := range m[u][tag] {
				sb.WriteByte(':')
				sb.WriteString(strconv.FormatInt(iv.Start, 10))
				if iv.Stop > iv.Start+1 {
					sb.WriteByte('-')
					sb.WriteString(strconv.FormatInt(iv.Stop-1, 10))
				}
			}
		}
	}
	return sb.String()
}

// sortedUUIDs orders as the server does (byte order, which is the order of the lowercase text).
func sortedUUIDs(m mysql.MysqlGTIDSet) []uuid.UUID {
	return slices.SortedFunc(maps.Keys(m), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
}

// sortedTags lists u's tags that hold intervals, the untagged group ("" sorts first) then by tag.
func sortedTags(m *mysql.MysqlGTIDSet, u uuid.UUID) []mysql.Tag {
	var tags []mysql.Tag
	for tag, ivs := range (*m)[u] {
		if len(ivs) > 0 {
			tags = append(tags, tag)
		}
	}
	slices.SortFunc(tags, func(a, b mysql.Tag) int { return cmp.Compare(a.String(), b.String()) })
	return tags
}

// pruneMySQL drops tags and uuids left without intervals, which go-mysql's Equal, Contain and
// Encode would otherwise treat as present.
func pruneMySQL(m mysql.MysqlGTIDSet) {
	for u, tags := range m {
		for tag, ivs := range tags {
			if len(ivs) == 0 {
				delete(tags, tag)
			}
		}
		if len(tags) == 0 {
			delete(m, u)
		}
	}
}

// subtractIntervals returns a minus b; both must be sorted and merged (Normalize), as is the result.
func subtractIntervals(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	out := mysql.IntervalSlice{}
	j := 0
	for _, iv := range a {
		cur := iv.Start
		for j < len(b) && b[j].Stop <= cur {
			j++
		}
		for k := j; k < len(b) && b[k].Start < iv.Stop && cur < iv.Stop; k++ {
			if b[k].Start > cur {
				out = append(out, mysql.Interval{Start: cur, Stop: b[k].Start})
			}
			cur = max(cur, b[k].Stop)
		}
		if cur < iv.Stop {
			out = append(out, mysql.Interval{Start: cur, Stop: iv.Stop})
		}
	}
	return out
}
