// Package checkpoint stores the GTID position outboxd has relayed, in one JSON file guarded by an
// exclusive lock so only one process advances it.
//
// The file is replaced atomically (temp file, fsync, rename, fsync of the directory): after a crash
// it holds either the previous checkpoint or the new one, never a mix. The caller decides what is
// safe to save; this package only makes the write durable.
package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/outboxd/outboxd/gtid"
)

// ErrLocked is returned (wrapped) by Open when another process, or another Store in this process,
// holds the checkpoint's lock.
var ErrLocked = errors.New("checkpoint is locked by another process")

// Checkpoint is the saved position: the GTIDs of every transaction whose messages the brokers
// acknowledged, with nothing unacknowledged below them.
type Checkpoint struct {
	Flavor  gtid.Flavor `json:"flavor"`
	GTIDSet string      `json:"gtid_set"` // server notation, as gtid.Set.String() prints
	File    string      `json:"binlog_file,omitempty"`
	Pos     uint32      `json:"binlog_pos,omitempty"`
	// CommitTime is the commit time of the newest checkpointed transaction.
	CommitTime time.Time `json:"commit_time,omitzero"`
	SavedAt    time.Time `json:"saved_at"`
	// Layouts are the outbox tables' column layouts at this position (see Layouts); nil when
	// not recorded.
	Layouts Layouts `json:"layouts,omitempty"`
	// Scope is what the checkpoint covers; nil in one written before outboxd recorded it.
	Scope *Scope `json:"scope,omitempty"`
}

// Set parses the checkpoint's GTID set. It does not block; on error the Set is the zero Set.
func (c Checkpoint) Set() (gtid.Set, error) {
	s, err := gtid.Parse(c.Flavor, c.GTIDSet)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("checkpoint gtid_set: %w", err)
	}
	return s, nil
}

// validate rejects what Load would refuse to read back.
func (c Checkpoint) validate() error {
	if err := c.Flavor.Validate(); err != nil {
		return fmt.Errorf("checkpoint flavor: %w", err)
	}
	_, err := c.Set()
	return err
}

// Store is the checkpoint file of one outboxd instance. It holds an exclusive lock on
// path+".lock" from Open until Close. Its methods are safe for concurrent use.
type Store struct {
	path string

	mu     sync.Mutex // serialises Save, Load and Close
	lock   *flock.Flock
	closed bool
	// last is the checkpoint this Store last read or wrote; nil while it never saw one. Once
	// set, a missing file means someone removed it under the lock (see lostLocked).
	last *Checkpoint
}

// Open creates path's parent directories (0o755) and takes the exclusive lock without waiting.
// If another process (another outboxd, or `outboxd checkpoint set`) holds it, Open fails at once
// with an error wrapping ErrLocked that names the path. Stale temp files left by a crash during
// Save are removed. Open does not read the checkpoint; call Load. On error nothing is held.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("checkpoint: empty path: set the checkpoint file path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint %s: create directory: %w", path, err)
	}
	lockPath := path + ".lock"
	lock := flock.New(lockPath)
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: lock %s: %w", path, lockPath, err)
	}
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: another process holds %s (stop the other outboxd first): %w",
			path, lockPath, ErrLocked)
	}
	// Only the lock holder writes temp files, so any left now belong to a Save that crashed.
	removeTemps(path)
	removeTemps(MarkPath(path))
	return &Store{path: path, lock: lock}, nil
}

// Path reports the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// Load reads the checkpoint. It returns nil, nil when none has been saved yet. A file that is not
// a valid checkpoint (bad JSON, unknown flavor, malformed GTID set) is an error naming the file;
// outboxd must not start from a guessed position. It blocks on file I/O only (ctx is not
// consulted: a local read is not worth abandoning half way).
func (s *Store) Load(context.Context) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("checkpoint %s: load after Close", s.path)
	}
	c, err := Read(s.path)
	if c != nil {
		s.last = c
	}
	return c, err
}

// Save replaces the checkpoint durably: it writes a temp file in the same directory, fsyncs it,
// renames it over the checkpoint and fsyncs the directory. A zero SavedAt is set to the current
// time. It blocks until the data is on disk. On error no temp file is left behind and the file
// holds the previous checkpoint (or, if only the directory fsync failed, the new one), and a
// failed write carries its fix (see Fix): make the file's directory writable. ctx is not
// consulted: an atomic rename is not worth abandoning half way.
func (s *Store) Save(_ context.Context, c Checkpoint) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("checkpoint %s: refuse to save: %w", s.path, err)
	}
	if c.SavedAt.IsZero() {
		c.SavedAt = time.Now().UTC()
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint %s: encode: %w", s.path, err)
	}
	data = append(data, '\n')

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("checkpoint %s: save after Close", s.path)
	}
	if c.Scope == nil || c.Scope.Lost == nil {
		// The rename would recreate a file removed while this Store held the lock and hide
		// the loss; keep c (acknowledged, as every save is) as a tombstone instead.
		if err := s.lostLocked(c, "the file was removed while this process held its lock"); err != nil {
			return err
		}
	}
	if err := writeAtomic(s.path, data); err != nil {
		return WithFix(fmt.Errorf("checkpoint %s: save: %w", s.path, err), fileSaveFix)
	}
	s.last = &c
	return nil
}

// lostLocked writes c as a tombstone and returns the *LostError to stop with when this Store
// read or wrote a checkpoint before and the file is gone now; nil otherwise. The caller holds
// s.mu.
func (s *Store) lostLocked(c Checkpoint, reason string) error {
	if s.last == nil {
		return nil
	}
	if _, err := os.Stat(s.path); !errors.Is(err, fs.ErrNotExist) {
		return nil // present, or unreadable: the write reports that
	}
	by := fmt.Sprintf("outboxd pid %d", os.Getpid())
	t := Tombstone(c, by, reason, time.Now())
	lost := &LostError{Where: s.path, GTIDSet: c.GTIDSet, Lost: *t.Scope.Lost}
	data, err := json.MarshalIndent(t, "", "  ")
	if err == nil {
		err = writeAtomic(s.path, append(data, '\n'))
	}
	if err != nil {
		return fmt.Errorf("%w (the tombstone was not written: %w)", lost, err)
	}
	s.last = &t
	return lost
}

// Close releases the lock. Later Load and Save calls fail. Closing twice is a no-op. When the
// file this Store read or wrote was removed meanwhile (and no save since noticed it), Close
// writes the last known checkpoint back as a tombstone and returns the *LostError (the lock is
// released all the same): the next start must not take source.start in its place.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	var lost error
	if s.last != nil {
		lost = s.lostLocked(*s.last, "the file was removed while this process held its lock (noticed at exit)")
	}
	s.closed = true
	// The lock file stays on disk: removing it would let a process that opened the old inode
	// and one that creates a new file both believe they hold the lock.
	if err := s.lock.Close(); err != nil {
		return errors.Join(lost, fmt.Errorf("checkpoint %s: release lock: %w", s.path, err))
	}
	return lost
}

// Read reads the checkpoint at path without taking the lock, for inspection (`outboxd checkpoint
// show`) while outboxd runs. It returns nil, nil when the file does not exist. Because Save
// renames atomically, Read sees a whole checkpoint, possibly one about to be replaced.
func Read(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: read: %w", path, err)
	}
	var c Checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: corrupt file (not a checkpoint JSON object): %w; "+
			"fix or delete it, or write a position with `outboxd checkpoint set`", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("checkpoint %s: corrupt file: data after the JSON object; "+
			"fix or delete it, or write a position with `outboxd checkpoint set`", path)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: corrupt file: %w; "+
			"fix or delete it, or write a position with `outboxd checkpoint set`", path, err)
	}
	return &c, nil
}

const tempInfix = ".tmp-"

func writeAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	// CreateTemp makes the file 0o600; the checkpoint is not secret and `checkpoint show` may run
	// as another user.
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	// Without this fsync the rename can reach the disk before the data, leaving an empty
	// checkpoint after a power loss.
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	// The rename is durable only once the directory entry is.
	if err = syncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeTemps deletes temp files of path left by an interrupted Save. Failures are ignored: a
// leftover temp file wastes a few bytes and never affects Load.
func removeTemps(path string) {
	matches, err := filepath.Glob(globEscape(path) + tempInfix + "*")
	if err != nil {
		return
	}
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// globEscape quotes the glob metacharacters of a literal path.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
