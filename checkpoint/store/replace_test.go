package store

import (
	"errors"
	"fmt"
	"testing"
)

// A refusal keeps its own message and still matches ErrRunning through wrapping.
func TestRunningErrorIsErrRunning(t *testing.T) {
	err := fmt.Errorf("the rows were sent but the checkpoint was not set: %w", runningError("an outboxd leads on this checkpoint: leader lock held"))
	if !errors.Is(err, ErrRunning) || err.Error() != "the rows were sent but the checkpoint was not set: an outboxd leads on this checkpoint: leader lock held" {
		t.Errorf("err = %q, errors.Is(ErrRunning) = %v", err, errors.Is(err, ErrRunning))
	}
	if errors.Is(errors.New("other"), ErrRunning) {
		t.Error("another error matches ErrRunning")
	}
}
