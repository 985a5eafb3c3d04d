package binlog

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// XA transactions in the binlog.
//
// Both servers write a two-phase XA transaction as two binlog groups with GTIDs of their own:
//
//   - at XA PREPARE, the rows: MariaDB 10.5+ writes a GTID event flagged FL_PREPARED_XA (the
//     event is itself the XA START), the rows, a Query "XA END X'..',X'..',n" and an
//     XA_PREPARE_LOG_EVENT; MySQL 8 writes a GTID event, a Query "XA START X'..',X'..',n", the
//     rows, a Query "XA END …" and an XA_PREPARE_LOG_EVENT;
//   - at XA COMMIT or XA ROLLBACK, perhaps much later and from another session: a GTID (MariaDB:
//     standalone, flagged FL_COMPLETED_XA) and one Query "XA COMMIT X'..',X'..',n" (or ROLLBACK).
//
// A one-phase XA COMMIT is a single group: MariaDB writes it as an ordinary transaction
// (BEGIN … XID); MySQL writes XA START … XA END and an XA_PREPARE_LOG_EVENT with one_phase set.
// The rows of a prepared group become visible only at its XA COMMIT, so the Assembler marks the
// groups (Txn.XA) and the pipeline holds the prepared rows until the commit group arrives.

// XID identifies an XA transaction branch: formatID, gtrid and bqual, compared byte for byte.
type XID struct {
	FormatID     int64
	Gtrid, Bqual string
}

// String renders the xid as it can be typed in XA COMMIT: 'gtrid' when bqual is empty and the
// formatID is the default 1, 'gtrid','bqual',formatID otherwise, and X'hex' for bytes that are
// not plain printable ASCII.
func (x XID) String() string {
	g, b := sqlString(x.Gtrid), sqlString(x.Bqual)
	if x.Bqual == "" && x.FormatID == 1 {
		return g
	}
	return g + "," + b + "," + strconv.FormatInt(x.FormatID, 10)
}

func sqlString(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '\'' || c == '\\' {
			return "X'" + strings.ToUpper(hex.EncodeToString([]byte(s))) + "'"
		}
	}
	return "'" + s + "'"
}

// XAOp is the step of an XA transaction that a Txn is.
type XAOp int

const (
	// XAPending marks a piece of a group that began with XA START and has not ended yet: whether
	// it ends prepared (rows wait for XA COMMIT) or committed in one phase is not known.
	XAPending XAOp = iota + 1
	// XAPrepare ends a prepared group: its rows, and its pieces, wait for XA COMMIT of XID.
	XAPrepare
	// XAOnePhase ends a group committed by XA COMMIT … ONE PHASE (MySQL): its rows, and those of
	// its XAPending pieces, are committed now.
	XAOnePhase
	// XACommit is the group of XA COMMIT XID: the prepared rows of XID are committed now.
	XACommit
	// XARollback is the group of XA ROLLBACK XID: the prepared rows of XID are discarded.
	XARollback
)

func (o XAOp) String() string {
	switch o {
	case XAPending:
		return "pending"
	case XAPrepare:
		return "XA PREPARE"
	case XAOnePhase:
		return "XA COMMIT ONE PHASE"
	case XACommit:
		return "XA COMMIT"
	case XARollback:
		return "XA ROLLBACK"
	}
	return "XAOp(" + strconv.Itoa(int(o)) + ")"
}

// XAStep says which step of an XA transaction a Txn is; XID is unset on XAPending pieces (MariaDB
// names the xid only in the XA_PREPARE_LOG_EVENT that go-mysql decodes).
type XAStep struct {
	Op  XAOp
	XID XID
}

// mariadbFlPreparedXA is MariaDB's FL_PREPARED_XA flag of a GTID event: the group is the
// XA START … XA PREPARE part of an XA transaction (go-mysql v1.16 has no constant for it).
const mariadbFlPreparedXA = 0x40

// xaGroup is the Assembler's state for the open group when it began as an XA transaction.
type xaGroup struct {
	open bool // the open group began with XA START (MySQL query) or an FL_PREPARED_XA GTID
}

// pieceStep is the XA mark of a piece split off the open group.
func (a *Assembler) pieceStep() *XAStep {
	if !a.xa.open {
		return nil
	}
	return &XAStep{Op: XAPending}
}

// xaPrepare handles an XA_PREPARE_LOG_EVENT, which ends the open XA group. go-mysql v1.16 parses
// it as a GenericEvent for both flavors.
func (a *Assembler) xaPrepare(ev *replication.BinlogEvent, e *replication.GenericEvent) (*Txn, error) {
	onePhase, xid, err := parseXAPrepare(e.Data)
	if err != nil {
		return nil, fmt.Errorf("XA_PREPARE_LOG_EVENT at %s:%d: %w", a.file, ev.Header.LogPos, err)
	}
	if a.cur == nil {
		return nil, fmt.Errorf("XA_PREPARE_LOG_EVENT for XA %s at %s:%d outside a transaction: the binlog stream is not what outboxd expects; "+
			"XA transactions cannot be relayed from it", xid, a.file, ev.Header.LogPos)
	}
	t := a.complete()
	t.XA = &XAStep{Op: XAPrepare, XID: xid}
	if onePhase {
		t.XA.Op = XAOnePhase
	}
	return t, nil
}

// xaQuery recognises the queries of XA transactions: it marks a MySQL group that begins with
// XA START, and it completes the group of an XA COMMIT or XA ROLLBACK with its xid. ok is false
// for every other query, which handleQuery then takes as usual.
func (a *Assembler) xaQuery(ev *replication.BinlogEvent, e *replication.QueryEvent) (t *Txn, ok bool, err error) {
	q := strings.TrimSpace(string(e.Query))
	if a.state == stateAfterGTID && hasPrefixFold(q, "XA START") {
		a.xa.open = true
		return nil, false, nil
	}
	if a.state != stateAfterGTID && a.state != stateStandalone {
		return nil, false, nil
	}
	op, rest := XAOp(0), ""
	switch {
	case hasXAKeyword(q, "XA COMMIT"):
		op, rest = XACommit, q[len("XA COMMIT"):]
	case hasXAKeyword(q, "XA ROLLBACK"):
		op, rest = XARollback, q[len("XA ROLLBACK"):]
	default:
		return nil, false, nil
	}
	xid, tail, err := parseXIDText(rest)
	if err != nil {
		return nil, true, fmt.Errorf("%s at %s:%d: cannot read the xid of %q: %w; outboxd cannot match it to its XA PREPARE",
			op, a.file, ev.Header.LogPos, q, err)
	}
	if op == XACommit && hasXAKeyword(strings.TrimSpace(tail), "ONE PHASE") {
		op = XAOnePhase // not written by MariaDB or MySQL 8, which log one-phase XA as one group
	}
	t = a.handleQuery(ev, e)
	if t == nil {
		return nil, true, fmt.Errorf("%s at %s:%d did not end a transaction", op, a.file, ev.Header.LogPos)
	}
	t.XA = &XAStep{Op: op, XID: xid}
	return t, true, nil
}

// hasXAKeyword reports whether q starts with the words of kw (separated in q by any blanks),
// not followed by more of an identifier.
func hasXAKeyword(q, kw string) bool {
	for w := range strings.FieldsSeq(kw) {
		q = strings.TrimLeft(q, " \t\r\n")
		if !hasPrefixFold(q, w) {
			return false
		}
		q = q[len(w):]
	}
	if q == "" {
		return true
	}
	c := q[0]
	return !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
}

// parseXAPrepare decodes an XA_PREPARE_LOG_EVENT's body: one_phase (1 byte), formatID (4),
// gtrid_length (4), bqual_length (4), then gtrid and bqual (MySQL's libbinlogevents
// XA_prepare_event; MariaDB writes the same layout).
func parseXAPrepare(data []byte) (onePhase bool, xid XID, err error) {
	const head = 13
	if len(data) < head {
		return false, XID{}, fmt.Errorf("event body of %d bytes is shorter than the %d-byte XA_PREPARE header", len(data), head)
	}
	onePhase = data[0] != 0
	xid.FormatID = int64(int32(binary.LittleEndian.Uint32(data[1:])))
	g := binary.LittleEndian.Uint32(data[5:])
	b := binary.LittleEndian.Uint32(data[9:])
	if g > 64 || b > 64 || uint64(head)+uint64(g)+uint64(b) > uint64(len(data)) {
		return false, XID{}, fmt.Errorf("xid lengths gtrid=%d bqual=%d do not fit the %d-byte event body", g, b, len(data))
	}
	xid.Gtrid = string(data[head : head+g])
	xid.Bqual = string(data[head+g : head+g+b])
	return onePhase, xid, nil
}

// parseXIDText parses the xid that follows XA COMMIT / XA ROLLBACK: gtrid [, bqual [, formatID]]
// with each string as 'text', "text", X'hex', 0xhex or B'bits', and formatID as a decimal or
// 0x number (MySQL's xid grammar); bqual defaults to ” and formatID to 1. It returns the text
// after the xid.
func parseXIDText(s string) (XID, string, error) {
	x := XID{FormatID: 1}
	var err error
	if x.Gtrid, s, err = parseXIDString(s); err != nil {
		return XID{}, "", fmt.Errorf("gtrid: %w", err)
	}
	if s, ok := comma(s); ok {
		if x.Bqual, s, err = parseXIDString(s); err != nil {
			return XID{}, "", fmt.Errorf("bqual: %w", err)
		}
		if s, ok := comma(s); ok {
			if x.FormatID, s, err = parseXIDNumber(s); err != nil {
				return XID{}, "", fmt.Errorf("formatID: %w", err)
			}
			return x, s, checkXIDLengths(x)
		}
		return x, s, checkXIDLengths(x)
	}
	return x, s, checkXIDLengths(x)
}

func checkXIDLengths(x XID) error {
	if len(x.Gtrid) > 64 || len(x.Bqual) > 64 {
		return errors.New("gtrid and bqual are at most 64 bytes each")
	}
	return nil
}

func comma(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t\r\n")
	if strings.HasPrefix(s, ",") {
		return s[1:], true
	}
	return s, false
}

// parseXIDString parses one string literal of an xid and returns the rest.
func parseXIDString(s string) (string, string, error) {
	s = strings.TrimLeft(s, " \t\r\n")
	if s == "" {
		return "", "", errors.New("missing")
	}
	switch c := s[0]; {
	case c == '\'' || c == '"':
		return quoted(s)
	case (c == 'X' || c == 'x') && len(s) > 1 && s[1] == '\'':
		end := strings.IndexByte(s[2:], '\'')
		if end < 0 {
			return "", "", errors.New("unterminated X'…'")
		}
		b, err := hex.DecodeString(s[2 : 2+end])
		if err != nil {
			return "", "", fmt.Errorf("X'%s': %w", s[2:2+end], err)
		}
		return string(b), s[3+end:], nil
	case (c == 'B' || c == 'b') && len(s) > 1 && s[1] == '\'':
		end := strings.IndexByte(s[2:], '\'')
		if end < 0 {
			return "", "", errors.New("unterminated B'…'")
		}
		b, err := bitsToBytes(s[2 : 2+end])
		return string(b), s[3+end:], err
	case c == '0' && len(s) > 2 && (s[1] == 'x' || s[1] == 'X'):
		n := 2
		for n < len(s) && isHexDigit(s[n]) {
			n++
		}
		digits := s[2:n]
		if len(digits)%2 == 1 {
			digits = "0" + digits // MySQL pads an odd 0x literal on the left
		}
		b, err := hex.DecodeString(digits)
		return string(b), s[n:], err
	case c == '0' && len(s) > 2 && (s[1] == 'b' || s[1] == 'B'):
		n := 2
		for n < len(s) && (s[n] == '0' || s[n] == '1') {
			n++
		}
		b, err := bitsToBytes(s[2:n])
		return string(b), s[n:], err
	}
	return "", "", fmt.Errorf("want a quoted string, X'hex', 0xhex or B'bits' at %q", s)
}

// quoted parses a '…' or "…" literal with doubled quotes and backslash escapes
// (sql_mode without NO_BACKSLASH_ESCAPES; the binlog itself always uses X'…').
func quoted(s string) (string, string, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q && i+1 < len(s) && s[i+1] == q:
			b.WriteByte(q)
			i++
		case c == q:
			return b.String(), s[i+1:], nil
		case c == '\\' && i+1 < len(s):
			i++
			switch e := s[i]; e {
			case '0':
				b.WriteByte(0)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			case 'Z':
				b.WriteByte(0x1a)
			case '%', '_':
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated quoted string")
}

func parseXIDNumber(s string) (int64, string, error) {
	s = strings.TrimLeft(s, " \t\r\n")
	base, n := 10, 0
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		base, n = 16, 2
	}
	start := n
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || base == 16 && isHexDigit(s[n])) {
		n++
	}
	if n == start {
		return 0, "", fmt.Errorf("want a number at %q", s)
	}
	v, err := strconv.ParseUint(s[start:n], base, 32)
	if err != nil {
		return 0, "", err
	}
	return int64(int32(uint32(v))), s[n:], nil
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func bitsToBytes(bits string) ([]byte, error) {
	if bits == "" {
		return []byte{}, nil
	}
	for len(bits)%8 != 0 {
		bits = "0" + bits
	}
	out := make([]byte, len(bits)/8)
	for i := range out {
		v, err := strconv.ParseUint(bits[i*8:i*8+8], 2, 8)
		if err != nil {
			return nil, err
		}
		out[i] = byte(v)
	}
	return out, nil
}
