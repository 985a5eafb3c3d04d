package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/sink"
)

// Store is the Kafka checkpoint store as run and the commands hold it (checkpoint.store:
// kafka): Load reads the committed checkpoint back without fencing anyone, and Claim, a term's
// start, opens the fencing Session that Send, Save and Abort go through. It is the mysql
// store's Claimer in this store's terms: the broker keeps the fencing token (the producer
// epoch of the transactional id), so a holder that was superseded learns it from the broker's
// refusal of its next send or commit (sink.ErrFenced), never from a token it reads. Safe for
// concurrent use.
type Store struct {
	o Options

	mu     sync.Mutex
	reader *Session // built by NewStore: Load and Check before (and besides) a claim
	sess   *Session // the claimed session; nil before Claim
	epoch  uint64   // the last claim's epoch (see Claim)
	holder string
}

var (
	_ checkpoint.Storage = (*Store)(nil)
	_ checkpoint.Claimer = (*Store)(nil)
	_ sink.Sink          = (*Store)(nil)
	_ sink.Checker       = (*Store)(nil)
)

// NewStore builds the store without contacting the brokers. It does not block.
func NewStore(o Options) (*Store, error) {
	r, err := New(o)
	if err != nil {
		return nil, err
	}
	return &Store{o: o, reader: r}, nil
}

// Observe sets the hooks of the sessions later claims open (Options.OnFenced, OnTxn): run's
// metrics. It does not block.
func (st *Store) Observe(onFenced func(), onTxn func(committed bool)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.o.OnFenced, st.o.OnTxn = onFenced, onTxn
}

// Claim makes this process the transactional id's producer: it verifies the checkpoint topic
// (creating it when missing, as check does), closes the session of an earlier claim and opens
// a new one, whose InitProducerID aborts the previous holder's open
// transaction and makes the broker refuse that holder's later sends. It blocks until the
// coordinator answered or ctx ends, and returns the producer epoch the coordinator gave (at
// least one more than this Store's previous claim) as the epoch.
func (st *Store) Claim(ctx context.Context, holder string) (uint64, error) {
	st.mu.Lock()
	old := st.sess
	st.sess = nil
	st.mu.Unlock()
	if old != nil {
		old.Close()
	}
	// run verifies (or creates) the checkpoint topic as check does: a save to a missing or
	// deleting one would stall, or lose the checkpoint to retention.
	if err := st.reader.Check(ctx, nil); err != nil {
		return 0, err
	}
	st.mu.Lock()
	o := st.o
	st.mu.Unlock()
	s, err := Open(ctx, o)
	if err != nil {
		return 0, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sess, st.holder = s, holder
	// The producer epoch orders every holder of the transactional id, in every process, as
	// the mysql row's epoch does; this Store's own count keeps it moving should the
	// coordinator ever hand out a new producer id (its epoch restarting at 0).
	st.epoch = max(st.epoch+1, uint64(s.ProducerEpoch()))
	return st.epoch, nil
}

// OwnToken is the last claim's epoch and holder (zero before Claim). It does not block.
func (st *Store) OwnToken() (uint64, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.epoch, st.holder
}

// Token reports the own token: the broker holds the real one and refuses a superseded
// holder's sends itself (sink.ErrFenced), so nothing is read here. It does not block.
func (st *Store) Token(context.Context) (uint64, string, bool, error) {
	e, h := st.OwnToken()
	return e, h, e > 0, nil
}

// claimed returns the claimed session, or an error when there is none.
func (st *Store) claimed() (*Session, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sess == nil {
		return nil, fmt.Errorf("kafka checkpoint %s: not claimed: only the process that claimed the transactional id %s sends and saves", st.o.Topic, st.o.TransactionalID)
	}
	return st.sess, nil
}

// Load reads the newest committed checkpoint (Session.Load), through the claimed session when
// there is one. It blocks until read or ctx ends.
func (st *Store) Load(ctx context.Context) (*checkpoint.Checkpoint, error) {
	return st.current().Load(ctx)
}

// current is the claimed session, or the read-only one when there is no claim.
func (st *Store) current() *Session {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sess != nil {
		return st.sess
	}
	return st.reader
}

// Save commits the open transaction with c as its checkpoint record (Session.Save). A Store
// not claimed yet (a command: checkpoint set, migrate) claims first, as holder "command",
// which fences a running outboxd: it stops at its next send or commit.
func (st *Store) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	s, err := st.claimed()
	if err != nil {
		if _, cerr := st.Claim(ctx, "command"); cerr != nil {
			return cerr
		}
		if s, err = st.claimed(); err != nil {
			return err
		}
	}
	return s.Save(ctx, c)
}

// Abort aborts the open transaction of the claimed session (none: nothing to abort).
func (st *Store) Abort(ctx context.Context) error {
	st.mu.Lock()
	s := st.sess
	st.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Abort(ctx)
}

// Send sends msgs in the claimed session's open transaction (Session.Send).
func (st *Store) Send(ctx context.Context, msgs []*sink.Message) error {
	s, err := st.claimed()
	if err != nil {
		return err
	}
	return s.Send(ctx, msgs)
}

// Check verifies the topics and the checkpoint topic (Session.Check) without fencing.
func (st *Store) Check(ctx context.Context, topics []string) error {
	return st.reader.Check(ctx, topics)
}

// Close closes both sessions. An open transaction is left to the broker (Session.Close).
func (st *Store) Close() error {
	st.mu.Lock()
	s := st.sess
	st.sess = nil
	st.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	return errors.Join(err, st.reader.Close())
}
