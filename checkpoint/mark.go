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

// markFile is the JSON of the file store's reconcile mark.
type markFile struct {
	ReconciledThrough time.Time `json:"reconciled_through"`
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
	var m markFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.ReconciledThrough.IsZero() {
		return time.Time{}, false, fmt.Errorf("reconcile mark %s: corrupt file (want {\"reconciled_through\": RFC 3339 time}): %v; "+
			"fix it, or delete it to start the periodic reconcile over at now - reconcile.delay - reconcile.window", path, err)
	}
	return m.ReconciledThrough, true, nil
}

// SaveMark replaces the reconcile mark durably, the way Save replaces the checkpoint (temp
// file, fsync, rename, fsync of the directory). It blocks until the data is on disk; on error
// the file holds the previous mark.
func (s *Store) SaveMark(_ context.Context, t time.Time) error {
	data, err := json.Marshal(markFile{ReconciledThrough: t.UTC()})
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
