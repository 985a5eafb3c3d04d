package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/checkpoint"
)

// flakyStore fails its first loads with err, then returns cp.
type flakyStore struct {
	fails int
	err   error
	cp    *checkpoint.Checkpoint
	loads int
}

func (s *flakyStore) Load(context.Context) (*checkpoint.Checkpoint, error) {
	s.loads++
	if s.loads <= s.fails {
		return nil, s.err
	}
	return s.cp, nil
}
func (s *flakyStore) Save(context.Context, checkpoint.Checkpoint) error { return nil }
func (s *flakyStore) Close() error                                      { return nil }

// A checkpoint load at start that hits a broken store connection (a reset, the writer
// restarting) is retried; one that fails for another reason is returned at once.
func TestLoadCheckpointRetriesUnreachable(t *testing.T) {
	want := &checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: "0-1-5"}
	st := &flakyStore{fails: 1, err: fmt.Errorf("load: %w: invalid connection", checkpoint.ErrUnreachable), cp: want}
	r := &relay{saver: &savedStore{store: st}, log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := r.loadCheckpoint(ctx)
	if err != nil || got != want || st.loads != 2 {
		t.Fatalf("got %v, %v after %d loads; want the checkpoint after 2", got, err, st.loads)
	}
	bad := errors.New("unknown column")
	st = &flakyStore{fails: 5, err: bad}
	r.saver = &savedStore{store: st}
	if _, err := r.loadCheckpoint(ctx); !errors.Is(err, bad) || st.loads != 1 {
		t.Fatalf("a non-transient error: got %v after %d loads, want it at once", err, st.loads)
	}
}
