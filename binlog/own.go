package binlog

import "github.com/go-mysql-org/go-mysql/replication"

// ownRows tracks, for the open transaction, whether its rows events touched outboxd's own
// checkpoint table and whether they touched anything else. A transaction of nothing but
// checkpoint rows is outboxd's own save read back (Txn.OnlyCheckpoint): it moves the position
// like any transaction, but it is no outbox progress, so the saver does not write the
// checkpoint again for it (else an idle server would get a write every interval forever) and
// the lag gauges do not count it as a transaction read.
type ownRows struct {
	own, other bool
}

// note records one rows event of the open transaction. ck is the checkpoint table (zero: none).
func (o *ownRows) note(ck tableKey, e *replication.RowsEvent) {
	if e.Table == nil {
		o.other = true
		return
	}
	if ck.table != "" && string(e.Table.Schema) == ck.schema && string(e.Table.Table) == ck.table {
		o.own = true
	} else {
		o.other = true
	}
}

// only reports whether every rows event of the transaction was on the checkpoint table.
func (o ownRows) only() bool { return o.own && !o.other }
