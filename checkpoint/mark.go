package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// markSuffix names the file store's reconcile mark, a sibling of the checkpoint file: the
// checkpoint's format stays as it is (an older outboxd refuses unknown fields there).
const markSuffix = ".reconcile"

// markFile is the JSON of the file store's reconcile mark (and of the kafka store's mark
// record).
type markFile struct {
	ReconciledThrough time.Time `json:"reconciled_through"`
}

// EncodeMark is a reconcile mark as the file store writes it: {"reconciled_through": RFC 3339
// time}. Pure.
func EncodeMark(t time.Time) ([]byte, error) {
	return json.Marshal(markFile{ReconciledThrough: t.UTC()})
}

// DecodeMark reads a mark EncodeMark wrote, strictly: anything else is an error (a guessed
// mark could skip rows). Pure.
func DecodeMark(data []byte) (time.Time, error) {
	var m markFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return time.Time{}, err
	}
	if m.ReconciledThrough.IsZero() {
		return time.Time{}, errors.New("no reconciled_through")
	}
	return m.ReconciledThrough, nil
}

// MarkPath is the file the Store at path keeps the reconcile mark in. Pure.
func MarkPath(path string) string { return path + markSuffix }

// LoadMark reads the reconcile mark; false when none was saved. A file that is not a mark is
// an error naming it (a guessed mark could skip rows). It blocks on file I/O only.
func (s *Store) LoadMark(context.Context) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, false, fmt.Errorf("checkpoint %s: load the reconcile mark after Close", s.path)
	}
	path := MarkPath(s.path)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reconcile mark %s: read: %w", path, err)
	}
	t, err := DecodeMark(data)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reconcile mark %s: corrupt file (want {\"reconciled_through\": RFC 3339 time}): %v; "+
			"fix it, or delete it to start the periodic reconcile over at now - reconcile.delay - reconcile.window", path, err)
	}
	return t, true, nil
}

// SaveMark replaces the reconcile mark durably, the way Save replaces the checkpoint (temp
// file, fsync, rename, fsync of the directory). It blocks until the data is on disk; on error
// the file holds the previous mark.
func (s *Store) SaveMark(_ context.Context, t time.Time) error {
	data, err := EncodeMark(t)
	if err != nil {
		return fmt.Errorf("reconcile mark %s: encode: %w", MarkPath(s.path), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("checkpoint %s: save the reconcile mark after Close", s.path)
	}
	if err := writeAtomic(MarkPath(s.path), append(data, '\n')); err != nil {
		return fmt.Errorf("reconcile mark %s: save: %w", MarkPath(s.path), err)
	}
	return nil
}
