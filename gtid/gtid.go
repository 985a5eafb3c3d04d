// Package gtid parses, merges and formats GTID sets of both flavors: MySQL ("uuid:1-5:7", tagged
// "uuid:tag:3" of 8.3+) and MariaDB ("0-1-42,1-2-7", one position per domain).
//
// A Set holds its own representation and imports no MySQL client, so config (which parses GTIDs)
// links none. It does not borrow go-mysql's either: go-mysql sorts MariaDB domains as text
// ("10-…" before "2-…"), joins MySQL uuid sets with "," where the server prints ",\n", accepts
// signs and empty elements, and its errors do not name the bad part. The binlog reader converts a
// Set to go-mysql's form for the dump request from Sources and Positions.
package gtid

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

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
	// my is a MySQL set: uuid → tag ("" for untagged GTIDs) → intervals, sorted and merged
	// (normalize), with no empty interval list, tag map or uuid left behind (prune). Nil unless
	// the set is an initialised MySQL set.
	my map[uuid.UUID]map[string][]Interval
	// ma is a MariaDB position: domain → the GTID of its last transaction. Nil unless the set is
	// an initialised MariaDB set.
	ma map[uint32]Position
}

// Interval is a run of MySQL transaction numbers, half-open as in the server's Gtid_set: Start
// is the first number, Stop one past the last. "5-7" is {5, 8}.
type Interval struct {
	Start, Stop int64
}

// Source is one MySQL source of a set: a server uuid and a tag ("" for untagged GTIDs, else
// lowercase as the server stores it) with its transactions, sorted, merged and never empty.
type Source struct {
	UUID      uuid.UUID
	Tag       string
	Intervals []Interval
}

// Empty returns an empty set of the flavor. For an unknown flavor it returns a set that behaves
// like the zero Set (empty, and Add fails); Parse reports the unknown flavor as an error.
func Empty(f Flavor) Set {
	switch f {
	case MySQL:
		return Set{flavor: f, my: map[uuid.UUID]map[string][]Interval{}}
	case MariaDB:
		return Set{flavor: f, ma: map[uint32]Position{}}
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
			err = parseMySQLPart(set.my, part)
		case MariaDB:
			err = parseMariaDBPart(set.ma, part)
		}
		if err != nil {
			return Set{}, fmt.Errorf("gtid: parse %s set %q: %w", f, s, err)
		}
	}
	for _, tags := range set.my {
		for tag, ivs := range tags {
			tags[tag] = normalize(ivs)
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
	switch {
	case s.my != nil:
		return formatMySQL(s.my)
	case s.ma != nil:
		return formatMariaDB(s.ma)
	}
	return ""
}

// Clone returns an independent copy.
func (s Set) Clone() Set {
	c := Set{flavor: s.flavor}
	if s.my != nil {
		c.my = make(map[uuid.UUID]map[string][]Interval, len(s.my))
		for u, tags := range s.my {
			ct := make(map[string][]Interval, len(tags))
			for tag, ivs := range tags {
				ct[tag] = slices.Clone(ivs)
			}
			c.my[u] = ct
		}
	}
	if s.ma != nil {
		c.ma = maps.Clone(s.ma)
	}
	return c
}

// Add records one transaction's GTID ("0-1-42", "uuid:7", "uuid:tag:3"). For MariaDB the GTID
// replaces the domain's position, as the server's binlog position does. On error s is unchanged.
func (s *Set) Add(gtid string) error {
	switch {
	case s.my != nil:
		u, tag, gno, err := parseMySQLGTID(gtid)
		if err != nil {
			return fmt.Errorf("gtid: add mysql GTID %q: %w", gtid, err)
		}
		tags := s.my[u]
		if tags == nil {
			tags = map[string][]Interval{}
			s.my[u] = tags
		}
		tags[tag] = normalize(append(tags[tag], Interval{gno, gno + 1}))
		return nil
	case s.ma != nil:
		g, err := parseMariaDBGTID(gtid)
		if err != nil {
			return fmt.Errorf("gtid: add mariadb GTID %q: %w", gtid, err)
		}
		s.ma[g.Domain] = g
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
	if s.flavor != o.flavor {
		return false
	}
	switch {
	case s.my != nil && o.my != nil:
		for u, otags := range o.my {
			for tag, oivs := range otags {
				if !containsIntervals(s.my[u][tag], oivs) {
					return false
				}
			}
		}
		return true
	case s.ma != nil && o.ma != nil:
		for d, op := range o.ma {
			if p, ok := s.ma[d]; !ok || p.Seq < op.Seq {
				return false
			}
		}
		return true
	}
	return false
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
	switch {
	case s.my != nil && o.my != nil:
		// Both are pruned, so equal maps are equal sets.
		return maps.EqualFunc(s.my, o.my, func(a, b map[string][]Interval) bool {
			return maps.EqualFunc(a, b, slices.Equal)
		})
	case s.ma != nil && o.ma != nil:
		return maps.Equal(s.ma, o.ma)
	}
	return false
}

// IsEmpty reports whether s holds no GTID.
func (s Set) IsEmpty() bool {
	// A MySQL set is pruned, so a uuid present holds a GTID.
	return len(s.my) == 0 && len(s.ma) == 0
}

// Sources returns a MySQL set's sources in the order String prints them: by uuid, then the
// untagged source first and the tags in order. It is nil for a MariaDB set, an empty set and the
// zero Set. The result shares no storage with s. Pure; safe for concurrent use with other reads
// of s.
func (s Set) Sources() []Source {
	var out []Source
	for _, u := range sortedUUIDs(s.my) {
		for _, tag := range sortedTags(s.my[u]) {
			out = append(out, Source{UUID: u, Tag: tag, Intervals: slices.Clone(s.my[u][tag])})
		}
	}
	return out
}

// MissingSources lists the sources that other has and s lacks entirely: MariaDB domain ids, or
// MySQL "uuid" / "uuid:tag" prefixes. Starting from s would replay those sources from their
// beginning. The list is in String order; it is empty (nil) when nothing is missing. When the
// flavors differ every source of other is missing.
func (s Set) MissingSources(other Set) []string {
	var missing []string
	for _, u := range sortedUUIDs(other.my) {
		for _, tag := range sortedTags(other.my[u]) {
			if len(s.my[u][tag]) > 0 {
				continue
			}
			src := u.String()
			if tag != "" {
				src += ":" + tag
			}
			missing = append(missing, src)
		}
	}
	for _, d := range sortedDomains(other.ma) {
		if _, ok := s.ma[d]; !ok {
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
	if s.flavor != o.flavor {
		return out
	}
	if out.my != nil && o.my != nil {
		for u, tags := range out.my {
			for tag, ivs := range tags {
				tags[tag] = subtractIntervals(ivs, o.my[u][tag])
			}
		}
		prune(out.my)
	}
	if out.ma != nil && o.ma != nil {
		for d, p := range out.ma {
			if op, ok := o.ma[d]; ok && op.Seq >= p.Seq {
				delete(out.ma, d)
			}
		}
	}
	return out
}

// Count is the number of transactions a MySQL set names (the sum of its intervals' lengths);
// 0 for a MariaDB set, whose positions do not say how many transactions precede them. Pure.
func (s Set) Count() uint64 {
	var n uint64
	for _, tags := range s.my {
		for _, ivs := range tags {
			for _, iv := range ivs {
				n += uint64(iv.Stop - iv.Start)
			}
		}
	}
	return n
}

// parseMySQLPart adds one comma-separated element, "uuid[:tag]:interval[:interval|:tag:interval]...",
// to set. Intervals are appended unnormalised; Parse normalises once at the end.
func parseMySQLPart(set map[uuid.UUID]map[string][]Interval, part string) error {
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
	tags := set[u]
	if tags == nil {
		tags = make(map[string][]Interval, 1)
		set[u] = tags
	}
	tag := ""
	tagPending := false // a tag was read and no interval follows it yet
	for _, e := range elems[1:] {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			return fmt.Errorf("element %q: empty field between colons", p)
		case isTagStart(e[0]):
			if tagPending {
				return fmt.Errorf("element %q: tag %q has no interval", p, tag)
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
		return fmt.Errorf("element %q: tag %q has no interval", p, tag)
	}
	return nil
}

// parseMySQLGTID parses one transaction's GTID: "uuid:N" or "uuid:tag:N".
func parseMySQLGTID(s string) (uuid.UUID, string, int64, error) {
	elems := strings.Split(strings.TrimSpace(s), ":")
	if len(elems) != 2 && len(elems) != 3 {
		return uuid.UUID{}, "", 0, fmt.Errorf("want uuid:N or uuid:tag:N")
	}
	u, err := parseUUID(elems[0])
	if err != nil {
		return uuid.UUID{}, "", 0, err
	}
	tag := ""
	if len(elems) == 3 {
		if tag, err = parseTag(strings.TrimSpace(elems[1])); err != nil {
			return uuid.UUID{}, "", 0, err
		}
	}
	gno, err := parseGNO(strings.TrimSpace(elems[len(elems)-1]))
	if err != nil {
		return uuid.UUID{}, "", 0, err
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

// parseTag checks MySQL's tag syntax [a-zA-Z_][a-zA-Z0-9_]{0,31} and lowercases it, as the
// server stores it.
func parseTag(s string) (string, error) {
	if len(s) == 0 || len(s) > 32 || !isTagStart(s[0]) {
		return "", fmt.Errorf("bad tag %q: want a letter or _ then up to 31 letters, digits or _", s)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isTagStart(c) && (c < '0' || c > '9') {
			return "", fmt.Errorf("bad tag %q: want a letter or _ then up to 31 letters, digits or _", s)
		}
	}
	return strings.ToLower(s), nil
}

// parseInterval parses "N" or "N-M" (closed) into a half-open Interval.
func parseInterval(s string) (Interval, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	start, err := parseGNO(strings.TrimSpace(lo))
	if err != nil {
		return Interval{}, fmt.Errorf("interval %q: %w", s, err)
	}
	end := start
	if isRange {
		if end, err = parseGNO(strings.TrimSpace(hi)); err != nil {
			return Interval{}, fmt.Errorf("interval %q: %w", s, err)
		}
		if end < start {
			return Interval{}, fmt.Errorf("interval %q: end %d is below start %d", s, end, start)
		}
	}
	return Interval{Start: start, Stop: end + 1}, nil
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
func parseMariaDBPart(set map[uint32]Position, part string) error {
	p := strings.TrimSpace(part)
	if p == "" {
		return fmt.Errorf("empty element between commas")
	}
	g, err := parseMariaDBGTID(p)
	if err != nil {
		return err
	}
	if prev, ok := set[g.Domain]; ok {
		return fmt.Errorf("element %q: domain %d already has position %s", p, g.Domain, prev)
	}
	set[g.Domain] = g
	return nil
}

func parseMariaDBGTID(s string) (Position, error) {
	s = strings.TrimSpace(s)
	// Cut, not Split: no slice allocated for each transaction the tracker folds.
	var f [3]string
	var ok1, ok2 bool
	f[0], f[1], ok1 = strings.Cut(s, "-")
	f[1], f[2], ok2 = strings.Cut(f[1], "-")
	if !ok1 || !ok2 || strings.Contains(f[2], "-") {
		return Position{}, fmt.Errorf("element %q: want domain-server-sequence", s)
	}
	names := [3]string{"domain id", "server id", "sequence number"}
	bits := [3]int{32, 32, 64}
	var v [3]uint64
	for i := range f {
		if !allDigits(f[i]) {
			return Position{}, fmt.Errorf("element %q: bad %s %q: want decimal digits", s, names[i], f[i])
		}
		n, err := strconv.ParseUint(f[i], 10, bits[i])
		if err != nil {
			return Position{}, fmt.Errorf("element %q: bad %s %q: want at most %d bits", s, names[i], f[i], bits[i])
		}
		v[i] = n
	}
	return Position{Domain: uint32(v[0]), Server: uint32(v[1]), Seq: v[2]}, nil
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

func formatMariaDB(m map[uint32]Position) string {
	var sb strings.Builder
	for i, d := range sortedDomains(m) {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(m[d].String())
	}
	return sb.String()
}

// sortedDomains orders numerically, as the server prints a position.
func sortedDomains(m map[uint32]Position) []uint32 {
	return slices.Sorted(maps.Keys(m))
}

// formatMySQL follows the server's Gtid_set::to_string with its default format: uuid sets
// separated by ",\n", a uuid written once followed by its (tag, intervals) groups in tag order.
func formatMySQL(m map[uuid.UUID]map[string][]Interval) string {
	var sb strings.Builder
	first := true
	for _, u := range sortedUUIDs(m) {
		tags := sortedTags(m[u])
		if len(tags) == 0 {
			continue
		}
		if !first {
			sb.WriteString(",\n")
		}
		first = false
		sb.WriteString(u.String())
		for _, tag := range tags {
			if tag != "" {
				sb.WriteByte(':')
				sb.WriteString(tag)
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
func sortedUUIDs(m map[uuid.UUID]map[string][]Interval) []uuid.UUID {
	return slices.SortedFunc(maps.Keys(m), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
}

// sortedTags lists the tags that hold intervals, the untagged group ("" sorts first) then by tag.
func sortedTags(tags map[string][]Interval) []string {
	var out []string
	for tag, ivs := range tags {
		if len(ivs) > 0 {
			out = append(out, tag)
		}
	}
	slices.Sort(out)
	return out
}

// prune drops tags and uuids left without intervals, so that map equality is set equality and
// a uuid present holds a GTID.
func prune(m map[uuid.UUID]map[string][]Interval) {
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
