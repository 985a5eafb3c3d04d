package kafkatxn

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/checkpoint"
)

// MarkSuffix makes the key of the periodic reconcile's mark record in the checkpoint topic:
// checkpoint.name + MarkSuffix. Its value is the file store's mark JSON
// ({"reconciled_through": RFC 3339 time}). The topic is compacted, so the newest record of
// each key, the checkpoint's and the mark's, is kept.
const MarkSuffix = "/reconcile_mark"

var (
	_ checkpoint.ReconcileMark = (*Session)(nil)
	_ checkpoint.ReconcileMark = (*Store)(nil)
)

// markKey is the mark record's key.
func (s *Session) markKey() string { return s.o.Key + MarkSuffix }

// SaveMark keeps t as the reconcile mark: the next Save writes it in the transaction it
// commits, so the mark is visible to read_committed readers at that commit and never
// without it. It does not block and does not open a transaction: a transaction begun only
// for the mark would stay open while nothing flows, until the coordinator aborts it on its
// timeout. This is safe because the mark only says "rows created before it were checked": a
// mark that lands late, or is lost with an aborted transaction or a crash, makes the next run
// check those rows again and skips none; and a fenced holder's mark can never commit.
// An older t than the one kept is ignored (the mark only moves forward). It fails on a
// session that Open did not fence (only the transactional id's holder writes the mark).
func (s *Session) SaveMark(_ context.Context, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return fmt.Errorf("kafka checkpoint %s: the reconcile mark is written only by the process that claimed the transactional id %s", s.o.Topic, s.o.TransactionalID)
	}
	if t.After(s.mark) {
		s.mark = t
	}
	return nil
}

// LoadMark returns the newest of the committed mark (read back read_committed from the
// checkpoint topic, never an aborted record) and the one this session keeps for its next
// commit: both were reached by completed runs. false when there is neither. It blocks on the
// read-back; a record that is not a mark is an error (a guessed mark could skip rows).
func (s *Session) LoadMark(ctx context.Context) (time.Time, bool, error) {
	data, err := s.loadKey(ctx, s.markKey())
	if err != nil {
		return time.Time{}, false, err
	}
	var t time.Time
	if data != nil {
		if t, err = checkpoint.DecodeMark(data); err != nil {
			return time.Time{}, false, fmt.Errorf("kafka checkpoint %s: corrupt reconcile mark record (key %q; want {\"reconciled_through\": RFC 3339 time}): %w; "+
				"write a tombstone for that key to start the periodic reconcile over at now - reconcile.delay - reconcile.window", s.o.Topic, s.markKey(), err)
		}
	}
	s.mu.Lock()
	if s.mark.After(t) {
		t = s.mark
	}
	s.mu.Unlock()
	return t, !t.IsZero(), nil
}

// pendingMark is the mark record the next commit carries and the mark it holds: nil when the
// kept mark is not newer than the last committed one.
func (s *Session) pendingMark() (*kgo.Record, time.Time, error) {
	s.mu.Lock()
	t, saved := s.mark, s.markSaved
	s.mu.Unlock()
	if !t.After(saved) {
		return nil, time.Time{}, nil
	}
	data, err := checkpoint.EncodeMark(t)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("encode the reconcile mark: %w", err)
	}
	return &kgo.Record{Topic: s.o.Topic, Key: []byte(s.markKey()), Value: data, Partition: 0}, t, nil
}

// markCommitted records that a commit carried the mark t.
func (s *Session) markCommitted(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.After(s.markSaved) {
		s.markSaved = t
	}
}

// LoadMark reads the reconcile mark (Session.LoadMark) through the claimed session, or the
// committed one when there is no claim. It blocks on the read-back.
func (st *Store) LoadMark(ctx context.Context) (time.Time, bool, error) {
	return st.current().LoadMark(ctx)
}

// SaveMark keeps t for the claimed session's next commit (Session.SaveMark); without a claim
// it fails: only the holder of the transactional id moves the mark. It does not block.
func (st *Store) SaveMark(ctx context.Context, t time.Time) error {
	s, err := st.claimed()
	if err != nil {
		return err
	}
	return s.SaveMark(ctx, t)
}
