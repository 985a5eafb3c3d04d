package kafkatxn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/sink"
)

var _ checkpoint.Storage = (*Session)(nil)

// Save writes c (the file store's JSON) keyed Key to Topic in the open transaction (begun if
// none) and commits it, so c becomes visible to read_committed readers together with every
// record sent since the last Save, and never without them. It blocks until the coordinator
// answered, waiting first for the Sends in flight.
//
// Errors: a record of the transaction failed, or the broker aborted it: the transaction is
// aborted and the error wraps sink.ErrTxnAborted (nothing of it is visible). Fenced: wraps
// sink.ErrFenced. An unknown outcome (a timeout on the commit) is a plain error: call Save
// again, which first finds out whether that commit landed (an abort, which fences any of this
// producer's transactions still open, then a read_committed read-back).
func (s *Session) Save(ctx context.Context, c checkpoint.Checkpoint) error {
	if err := c.Flavor.Validate(); err != nil {
		return fmt.Errorf("kafka checkpoint %s: refuse to save: %w", s.o.Topic, err)
	}
	if _, err := c.Set(); err != nil {
		return fmt.Errorf("kafka checkpoint %s: refuse to save: %w", s.o.Topic, err)
	}
	if c.SavedAt.IsZero() {
		c.SavedAt = time.Now().UTC()
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("kafka checkpoint %s: encode: %w", s.o.Topic, err)
	}
	data = append(data, '\n')

	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.mu.Lock()
	unknown := s.unknown
	s.mu.Unlock()
	if unknown != nil {
		return s.resolveLocked(ctx, unknown, c)
	}
	if err := s.begin(); err != nil {
		if errors.Is(err, sink.ErrTxnAborted) {
			return s.abortedLocked(ctx, err)
		}
		return err
	}
	recs := []*kgo.Record{{Topic: s.o.Topic, Key: []byte(s.o.Key), Value: data, Partition: 0}}
	mark, markAt, err := s.pendingMark()
	if err != nil {
		return s.abortedLocked(ctx, fmt.Errorf("kafka checkpoint %s: %w: %w", s.o.Topic, sink.ErrTxnAborted, err))
	}
	if mark != nil {
		recs = append(recs, mark)
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		if isFenced(err) {
			return s.fencedError(err)
		}
		if ctx.Err() != nil {
			// The record may still land in this transaction; a later Save's record follows it
			// in the partition and wins.
			return fmt.Errorf("kafka checkpoint %s: produce: %w", s.o.Topic, err)
		}
		return s.abortedLocked(ctx, fmt.Errorf("kafka checkpoint %s: %w: the checkpoint record failed: %w", s.o.Topic, sink.ErrTxnAborted, err))
	}
	err = s.cl.EndTransaction(ctx, kgo.TryCommit)
	switch {
	case err == nil:
		s.ended(true)
		if mark != nil {
			s.markCommitted(markAt)
		}
		return nil
	case isFenced(err):
		return s.fencedError(err)
	case errors.Is(err, kerr.OperationNotAttempted), errors.Is(err, kerr.TransactionAbortable),
		errors.Is(err, kerr.InvalidTxnState), errors.Is(err, kerr.InvalidProducerIDMapping):
		return s.abortedLocked(ctx, fmt.Errorf("kafka checkpoint %s: %w: the broker refused the commit: %w", s.o.Topic, sink.ErrTxnAborted, err))
	}
	s.mu.Lock()
	s.unknown = data
	s.mu.Unlock()
	return fmt.Errorf("kafka checkpoint %s: commit outcome unknown (Save again to find out): %w", s.o.Topic, err)
}

// resolveLocked finds out whether the commit that carried unknown landed, then answers the
// Save of c: nil when it did and c is that checkpoint; ErrTxnAborted otherwise (c cannot be
// committed on its own: the records it covers were in that transaction). The caller holds txnMu.
func (s *Session) resolveLocked(ctx context.Context, unknown []byte, c checkpoint.Checkpoint) error {
	// kgo aborts after an unknown outcome by bumping the epoch (InitProducerID with the
	// current id and epoch, KIP-588), which ends anything of this producer still open. It is
	// harmless when the commit landed.
	if err := s.endAbort(ctx); err != nil {
		return err
	}
	got, err := s.loadRaw(ctx)
	if err != nil {
		return fmt.Errorf("kafka checkpoint %s: commit outcome unknown, and reading it back failed: %w", s.o.Topic, err)
	}
	s.mu.Lock()
	s.unknown = nil
	s.mu.Unlock()
	if !bytes.Equal(got, unknown) {
		return fmt.Errorf("kafka checkpoint %s: %w: the commit whose outcome was unknown did not land", s.o.Topic, sink.ErrTxnAborted)
	}
	var was checkpoint.Checkpoint
	if err := json.Unmarshal(unknown, &was); err == nil && was.GTIDSet == c.GTIDSet && was.Flavor == c.Flavor {
		return nil
	}
	return fmt.Errorf("kafka checkpoint %s: %w: the earlier commit landed with gtid_set %s, not this checkpoint's; restart from the committed one", s.o.Topic, sink.ErrTxnAborted, was.GTIDSet)
}

// Abort ends the open transaction with an abort: nothing sent since the last Save becomes
// visible. A no-op when none is open. It blocks until the coordinator answered, waiting first
// for the Sends in flight. Fenced: wraps sink.ErrFenced.
func (s *Session) Abort(ctx context.Context) error {
	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.mu.Lock()
	open := s.inTxn || s.unknown != nil
	s.mu.Unlock()
	if !open {
		return nil
	}
	if err := s.endAbort(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.unknown = nil
	s.mu.Unlock()
	return nil
}

// abortedLocked aborts the open transaction and returns cause (which wraps sink.ErrTxnAborted),
// or the abort's own failure joined to it. The caller holds txnMu.
func (s *Session) abortedLocked(ctx context.Context, cause error) error {
	if err := s.endAbort(ctx); err != nil {
		if errors.Is(err, sink.ErrFenced) {
			return err
		}
		return errors.Join(cause, err)
	}
	return cause
}

// endAbort drops what is buffered and aborts the transaction. The caller holds txnMu. A fenced
// session sends nothing more: kgo's abort may reload the producer id, and a deposed holder must
// not ask the coordinator for anything.
func (s *Session) endAbort(ctx context.Context) error {
	s.mu.Lock()
	fenced := s.fenced
	s.mu.Unlock()
	if fenced != nil {
		return fenced
	}
	if err := s.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("kafka sink %q: abort buffered records: %w", s.o.Name, err)
	}
	err := s.cl.EndTransaction(ctx, kgo.TryAbort)
	if err != nil {
		if isFenced(err) {
			return s.fencedError(err)
		}
		return fmt.Errorf("kafka sink %q: abort transaction: %w", s.o.Name, err)
	}
	s.ended(false)
	return nil
}

// ended resets the transaction state after an EndTxn and reports it (OnTxn).
func (s *Session) ended(committed bool) {
	s.mu.Lock()
	s.inTxn, s.doomed = false, nil
	s.mu.Unlock()
	if s.o.OnTxn != nil {
		s.o.OnTxn(committed)
	}
}

// Load reads back the newest committed checkpoint record with Key from Topic's partition 0,
// read_committed, up to the last stable offset as of the call: a record of an aborted or still
// open transaction is never returned. It returns nil, nil when there is none, or when the topic
// does not exist (check and run create it). It blocks until read or ctx ends. A record that is
// not a checkpoint is an error: outboxd must not start from a guessed position.
func (s *Session) Load(ctx context.Context) (*checkpoint.Checkpoint, error) {
	data, err := s.loadRaw(ctx)
	if err != nil || data == nil {
		return nil, err
	}
	return decode(s.o.Topic, data)
}

// decode reads a checkpoint record strictly, as checkpoint.Read reads the file.
func decode(topic string, data []byte) (*checkpoint.Checkpoint, error) {
	const fix = "write a position with `outboxd checkpoint set`"
	var c checkpoint.Checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("kafka checkpoint %s: corrupt record (not a checkpoint JSON object): %w; %s", topic, err, fix)
	}
	if dec.More() {
		return nil, fmt.Errorf("kafka checkpoint %s: corrupt record: data after the JSON object; %s", topic, fix)
	}
	err := c.Flavor.Validate()
	if err == nil {
		_, err = c.Set()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka checkpoint %s: corrupt record: %w; %s", topic, err, fix)
	}
	return &c, nil
}

// loadRaw returns the value of the newest committed record with Key (nil when none or when the
// newest is a tombstone).
func (s *Session) loadRaw(ctx context.Context) ([]byte, error) {
	return s.loadKey(ctx, s.o.Key)
}

// loadKey returns the value of the newest committed record with key (nil when none or when the
// newest is a tombstone).
func (s *Session) loadKey(ctx context.Context, key string) ([]byte, error) {
	lso, found, err := s.lastStable(ctx)
	if err != nil || !found || lso == 0 {
		return nil, err
	}
	// The newest record with key is near the end: every commit writes one. Read the last
	// offsets first and look further back only while none is found, so that a start, a
	// takeover, does not read the whole partition (compaction never touches its active
	// segment, which holds every commit of days).
	for window := int64(256); ; window *= 16 {
		from := max(0, lso-window)
		val, seen, err := s.readRange(ctx, key, from, lso)
		if err != nil || seen || from == 0 {
			return val, err
		}
	}
}

// readRange reads Topic's partition 0 from offset from up to lso, read_committed, and returns
// the value of the newest record with key in that range (seen false when there is none).
func (s *Session) readRange(ctx context.Context, key string, from, lso int64) (val []byte, seen bool, err error) {
	opts, _, err := clientOpts(s.o)
	if err != nil {
		return nil, false, err
	}
	// Control records are kept so that the read knows when it reached lso: the offset just
	// below it is a commit or abort marker or a committed record, never an aborted record
	// (its marker would be below lso). Aborted records are dropped by kgo (read_committed).
	// Should compaction ever remove the record just below lso (the cleaner leaves the active
	// segment alone, where the newest marker normally is), this waits until ctx ends: an error,
	// never an older checkpoint taken for the newest. An offset from below the log's start
	// (compacted or deleted away) reads from the start.
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.o.Topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return nil, false, fmt.Errorf("kafka checkpoint %s: %w", s.o.Topic, err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("kafka checkpoint %s: read back to offset %d: %w", s.o.Topic, lso, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, false, fmt.Errorf("kafka checkpoint %s: read back: %w", s.o.Topic, ferr)
		}
		last := int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			last = max(last, r.Offset)
			if !r.Attrs.IsControl() && string(r.Key) == key && r.Offset < lso {
				val, seen = r.Value, true
			}
		})
		if last >= lso-1 {
			return val, seen, nil
		}
	}
}

// lastStable asks the partition leader for Topic partition 0's last stable offset (ListOffsets
// latest, read_committed). found is false when the topic does not exist.
func (s *Session) lastStable(ctx context.Context) (lso int64, found bool, err error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = s.o.Topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("kafka checkpoint %s: list offsets: %w", s.o.Topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition != 0 {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownTopicOrPartition) {
					return 0, false, nil
				}
				return 0, false, fmt.Errorf("kafka checkpoint %s: list offsets: %w", s.o.Topic, err)
			}
			return p.Offset, true, nil
		}
	}
	return 0, false, nil
}
