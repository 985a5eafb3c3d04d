package checkpoint

import (
	"context"
	"time"
)

// Storage is where a checkpoint is kept: the file Store or the MySQLStore. Load returns nil, nil
// before the first Save; Save replaces the checkpoint durably (it blocks until the write is
// durable, and on error the previous checkpoint is still what Load returns); Close releases what
// the store holds, after which Load and Save fail. Implementations are safe for concurrent use.
type Storage interface {
	Load() (*Checkpoint, error)
	Save(c Checkpoint) error
	Close() error
}

var (
	_ Storage = (*Store)(nil)
	_ Storage = (*MySQLStore)(nil)
)

// ReconcileMark is the periodic reconcile's "checked up to" mark, kept with the checkpoint so
// that it survives restarts and takeovers as the checkpoint does: every row with created_at
// before the mark was checked against the brokers by a completed run. LoadMark reports false
// before the first SaveMark. SaveMark replaces the mark durably (it blocks until the write is
// durable; on error the previous mark is what LoadMark returns) and, on the mysql store, only
// while this process holds the row's fencing token, like Save. Safe for concurrent use.
type ReconcileMark interface {
	LoadMark(ctx context.Context) (time.Time, bool, error)
	SaveMark(ctx context.Context, t time.Time) error
}

var (
	_ ReconcileMark = (*Store)(nil)
	_ ReconcileMark = (*MySQLStore)(nil)
)
