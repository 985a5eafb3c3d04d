package importpos

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Canal keeps each client's acknowledged cursor as a LogPosition. FileMixedMetaManager writes
// it to <canal.file.data.dir>/<destination>/meta.dat as
// {"clientDatas":[{"clientIdentity":{"clientId":1001,"destination":"example","filter":""},
// "cursor":{"identity":{...},"postion":{"gtid":"","included":false,"journalName":"mysql-bin.000001",
// "position":4450,"serverId":1,"timestamp":...}}}],"destination":"example"}; ZooKeeperMetaManager
// stores the same cursor JSON (with "@type") in the node
// /otter/canal/destinations/<destination>/<clientId>/cursor. The field is spelled "postion" by
// Canal's LogPosition; "position" is accepted too.
//
// What gtid means: a client's ack moves the cursor to the ack point of the batch, which
// MemoryEventStoreWithBuffer picks as the last TRANSACTIONEND (or DDL) entry, "in GTID mode the
// ack point must be a transaction's end, because the next subscription asks MySQL for what comes
// after this gtid" (its comment). The entry's gtid is the set including that transaction. So
// gtid is the executed set through the last transaction the client acknowledged in full. Without
// GTIDs (canal.instance.gtidon=false) the ack point can be a transaction's BEGIN and the offset is
// that event's start: no GTID state maps to it exactly, so it is refused.

type canalPosition struct {
	GTID        string `json:"gtid"`
	JournalName string `json:"journalName"`
	Position    int64  `json:"position"`
}

type canalCursor struct {
	Postion  *canalPosition `json:"postion"`
	Position *canalPosition `json:"position"`
}

type canalClient struct {
	ClientIdentity struct {
		ClientID    json.Number `json:"clientId"`
		Destination string      `json:"destination"`
	} `json:"clientIdentity"`
	Cursor *canalCursor `json:"cursor"`
}

type canalMeta struct {
	ClientDatas []canalClient `json:"clientDatas"`
	Destination string        `json:"destination"`
	canalCursor
}

// ReadCanal reads a Canal meta.dat (FileMixedMetaManager) or a ZooKeeper cursor node's content
// from r and returns the cursor of clientID ("" when the file holds one client's). It does not
// block beyond reading r.
func ReadCanal(r io.Reader, clientID string) (Position, error) {
	var m canalMeta
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return Position{}, fmt.Errorf("canal: not a meta.dat or cursor JSON: %w", err)
	}
	var cur *canalCursor
	where := ""
	switch {
	case m.Postion != nil || m.Position != nil: // a ZooKeeper cursor node
		cur, where = &m.canalCursor, "(cursor node)"
	case len(m.ClientDatas) > 0:
		var ids []string
		for i := range m.ClientDatas {
			c := &m.ClientDatas[i]
			id := c.ClientIdentity.ClientID.String()
			ids = append(ids, id)
			if clientID == "" && len(m.ClientDatas) == 1 || id == clientID {
				cur = c.Cursor
				where = fmt.Sprintf("of destination %s client %s", c.ClientIdentity.Destination, id)
			}
		}
		if where == "" {
			if clientID == "" {
				return Position{}, fmt.Errorf("canal: meta.dat holds the cursors of clients %s: pass --client-id", strings.Join(ids, ", "))
			}
			return Position{}, fmt.Errorf("canal: meta.dat has no client %s (clients: %s)", clientID, strings.Join(ids, ", "))
		}
	default:
		return Position{}, fmt.Errorf("canal: neither clientDatas (meta.dat) nor postion (a cursor node) in the file: nothing to import")
	}
	if cur == nil || (cur.Postion == nil && cur.Position == nil) {
		return Position{}, fmt.Errorf("canal: client %s has acknowledged nothing yet: no cursor to import (start outboxd with source.start, or outboxd backfill)", where)
	}
	pos := cur.Postion
	if pos == nil {
		pos = cur.Position
	}
	return Position{Tool: Canal, Where: where, GTIDSet: strings.TrimSpace(pos.GTID), File: pos.JournalName, Pos: pos.Position}, nil
}
