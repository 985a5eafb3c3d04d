package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/startpos"
)

func openStore(t *testing.T) (*checkpoint.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// Every origin but the checkpoint itself is written before streaming; the saved store then
// reports it as what is on disk.
func TestPrepareCheckpointPersistsTheStart(t *testing.T) {
	start, err := gtid.Parse(gtid.MariaDB, "0-1-8,1-2-3")
	if err != nil {
		t.Fatal(err)
	}
	for _, origin := range []string{"source.start: latest", "source.start: earliest", "source.start", "--from-gtid"} {
		t.Run(origin, func(t *testing.T) {
			store, path := openStore(t)
			saved := newSavedStore(t.Context(), store, metrics.New(metrics.Options{}))
			err := saved.prepare(t.Context(), start, origin, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			cp, err := checkpoint.Read(path)
			if err != nil || cp == nil || cp.GTIDSet != start.String() || cp.Flavor != gtid.MariaDB {
				t.Fatalf("checkpoint file %+v (%v), want %s", cp, err, start)
			}
			if st := saved.state(); !st.OK || st.Last.GTIDSet != start.String() || st.Err != nil {
				t.Fatalf("saved state %+v", st)
			}
		})
	}
}

// A start read from the checkpoint is not written again; the loaded one is what is saved.
func TestPrepareCheckpointKeepsALoadedCheckpoint(t *testing.T) {
	store, path := openStore(t)
	if err := store.Save(t.Context(), checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5"}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	start, _ := gtid.Parse(gtid.MariaDB, "0-1-5")
	saved := newSavedStore(t.Context(), store, nil)
	err := saved.prepare(t.Context(), start, startpos.OriginCheckpoint, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the checkpoint was rewritten at a start from the checkpoint")
	}
	if st := saved.state(); !st.OK || st.Last.GTIDSet != "0-1-5" {
		t.Fatalf("saved state %+v, want the loaded 0-1-5", st)
	}
}

type failingSaver struct{ err error }

func (f failingSaver) Save(context.Context, checkpoint.Checkpoint) error { return f.err }

func TestPersistStartFailureWrapsErrCheckpointSave(t *testing.T) {
	disk := errors.New("read-only file system")
	err := persistStart(t.Context(), failingSaver{disk}, nil, gtid.Empty(gtid.MariaDB), "source.start: latest", zerolog.Nop())
	if !errors.Is(err, pipeline.ErrCheckpointSave) || !errors.Is(err, disk) {
		t.Fatalf("err = %v, want ErrCheckpointSave wrapping the disk error", err)
	}
}

// The start position's save error ends with the fix of the store that failed, whatever its
// class: a mysql store's lock wait is not told to make a directory writable, a file's is.
func TestPersistStartTellsTheStoresOwnFix(t *testing.T) {
	const lockFix = "end the transaction that holds a lock on the checkpoint row"
	for _, tc := range []struct {
		err       error
		want, not string
	}{
		{checkpoint.WithFix(errors.New("Lock wait timeout exceeded"), lockFix), "; " + lockFix, "directory"},
		{checkpoint.WithFix(errors.New("rename: read-only file system"), "make the checkpoint's directory writable"), "; make the checkpoint's directory writable", "row"},
		{fmt.Errorf("writer down: %w", checkpoint.ErrUnreachable), "writer down: checkpoint store unreachable", "directory"},
	} {
		err := persistStart(t.Context(), failingSaver{tc.err}, nil, gtid.Empty(gtid.MariaDB), "source.start: latest", zerolog.Nop())
		if msg := err.Error(); !strings.HasSuffix(msg, tc.want) || strings.Contains(msg, tc.not) {
			t.Errorf("persistStart = %q, want it to end with %q and not name %q", msg, tc.want, tc.not)
		}
	}
}

// A failed save keeps the last saved checkpoint and records the error until a save succeeds.
func TestSavedStoreReportsOnlyWhatReachedTheDisk(t *testing.T) {
	store, path := openStore(t)
	s := &savedStore{store: store}
	if err := s.Save(t.Context(), checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-1"}); err != nil {
		t.Fatal(err)
	}
	// Invalid checkpoints are refused by the store, which stands in for a disk error here.
	if err := s.Save(t.Context(), checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "not a set"}); err == nil {
		t.Fatal("an invalid checkpoint was saved")
	}
	st := s.state()
	if st.Last.GTIDSet != "0-1-1" || st.Err == nil || st.FailingSince.IsZero() {
		t.Fatalf("after a failed save: %+v", st)
	}
	if cp, _ := checkpoint.Read(path); cp.GTIDSet != "0-1-1" {
		t.Fatalf("file holds %q", cp.GTIDSet)
	}
	if err := s.Save(t.Context(), checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-2"}); err != nil {
		t.Fatal(err)
	}
	if st := s.state(); st.Last.GTIDSet != "0-1-2" || st.Err != nil || !st.FailingSince.IsZero() {
		t.Fatalf("after a good save: %+v", st)
	}
}

func TestStartupStopped(t *testing.T) {
	boom := errors.New("dial tcp 127.0.0.1:1: connection refused")
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := startupStopped(live, boom, zerolog.Nop()); !errors.Is(err, boom) {
		t.Fatalf("without a shutdown: %v, want the error", err)
	}
	if err := startupStopped(done, boom, zerolog.Nop()); err != nil {
		t.Fatalf("with a shutdown: %v, want nil", err)
	}
	saveErr := errors.Join(pipeline.ErrCheckpointSave, boom)
	if err := startupStopped(done, saveErr, zerolog.Nop()); !errors.Is(err, pipeline.ErrCheckpointSave) {
		t.Fatalf("an unsaved start with a shutdown: %v, want the error kept", err)
	}
	if err := startupStopped(done, nil, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
}
