package checkpoint

import (
	"context"
	"errors"
	"time"
)

// Storage is where a checkpoint is kept: the file Store or the MySQLStore. Load returns nil, nil
// before the first Save; Save replaces the checkpoint durably (it blocks until the write is
// durable or ctx ends, and on error the previous checkpoint is still what Load returns); Close
// releases what the store holds, after which Load and Save fail. Implementations are safe for
// concurrent use.
//
// What only some stores can do is asked by the capability interfaces below (Claimer, Pinger,
// HolderLocker, Tombstoner), not by the store's type.
type Storage interface {
	Load(ctx context.Context) (*Checkpoint, error)
	Save(ctx context.Context, c Checkpoint) error
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
// while this process holds the row's fencing token, like Save. The kafka store
// (sink/kafkatxn) is the exception: its SaveMark keeps the mark for the claimed session's next
// commit, so it becomes durable with that commit (a lost or late mark only makes a later run
// check rows again). Safe for concurrent use.
type ReconcileMark interface {
	LoadMark(ctx context.Context) (time.Time, bool, error)
	SaveMark(ctx context.Context, t time.Time) error
}

var (
	_ ReconcileMark = (*Store)(nil)
	_ ReconcileMark = (*MySQLStore)(nil)
)

// Claimer is a store whose checkpoint is written by one holder at a time, by a fencing token
// (epoch, holder) every save is conditional on: the mysql store's row, which processes on
// several hosts can reach. The file store needs none: its lock keeps a second process out.
// Claim makes holder the writer and returns the new epoch (blocking on the server); OwnToken
// is the token this store's saves carry (zero before Claim; it does not block); Token is the
// row's token as the server has it now (found false when there is no row; it blocks).
type Claimer interface {
	Claim(ctx context.Context, holder string) (epoch uint64, err error)
	OwnToken() (epoch uint64, holder string)
	Token(ctx context.Context) (epoch uint64, holder string, found bool, err error)
}

// Pinger is a store that lives on a server that can be away (ErrUnreachable): Ping reports
// whether it answers, as a Save's error would. It blocks on one round trip, bounded by ctx.
type Pinger interface {
	Ping(ctx context.Context) error
}

// HolderLocker is a store whose holder shows that it runs by a lock on the server (the mysql
// store's holder lock), so that commands refuse to run beside it. KeepHolderLock re-takes it
// after its connection dropped (failures are left for the next call); LiveHolder reports the
// row's holder and whether it runs. Both block on a query or two, bounded by ctx.
type HolderLocker interface {
	KeepHolderLock(ctx context.Context)
	LiveHolder(ctx context.Context) (holder string, connID uint64, alive bool, err error)
}

// Tombstoner is a store that writes a tombstone itself where its checkpoint is found gone,
// without the fencing a Save is conditional on (a claim-only or deleted row has no token of
// this process's). Stores without it take the tombstone as a Save. It blocks until written.
type Tombstoner interface {
	MarkLost(ctx context.Context, c Checkpoint, holder, reason string) error
}

// Overwriter is a store an operator's position (outboxd checkpoint set and migrate) is written
// to by taking it over from whoever holds it, so that a process still running on it stops at
// its next save instead of writing over the operator's position. Stores without it take the
// position as a Save under their lock. It blocks until written.
type Overwriter interface {
	Overwrite(ctx context.Context, c Checkpoint, holder string) error
}

var (
	_ Claimer      = (*MySQLStore)(nil)
	_ Pinger       = (*MySQLStore)(nil)
	_ HolderLocker = (*MySQLStore)(nil)
	_ Tombstoner   = (*MySQLStore)(nil)
	_ Overwriter   = (*MySQLStore)(nil)
)

// fixedError is a store's error with the change that ends it, kept apart from the text so
// that a caller that stops on it says the fix once, where its own message tells the operator
// what to do next (the pipeline's "saves have failed since ..."), whichever store it runs on.
type fixedError struct {
	err error
	fix string
}

func (e *fixedError) Error() string { return e.err.Error() }
func (e *fixedError) Unwrap() error { return e.err }

// WithFix attaches fix, what the operator changes to end err, for Fix to report; the text of
// err is unchanged. A store outside this package words its own fixes with it. Nil stays nil.
// Pure.
func WithFix(err error, fix string) error {
	if err == nil {
		return nil
	}
	return &fixedError{err: err, fix: fix}
}

// fileSaveFix is the file store's fix for a write that failed.
const fileSaveFix = "make the checkpoint's directory writable (full disk, read-only or immutable file system?)"

// Fix is what the store that returned err says the operator changes to end it: the file store's
// failed writes name the directory, the mysql store's transient failures the lock holder. It is
// "" when the store attached none, because the error's text says what to change already (the
// mysql store's misconfigured, unreachable and superseded errors) or nothing will. Pure.
func Fix(err error) string {
	if f := (*fixedError)(nil); errors.As(err, &f) {
		return f.fix
	}
	return ""
}
