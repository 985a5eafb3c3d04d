package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
)

func TestStoreFaultEndsTheSession(t *testing.T) {
	var f storeFault
	// A transient failure (a lock wait) is the pipeline's to retry: the session goes on.
	ctx, end := f.session(context.Background())
	f.report(errors.New("Error 1205: Lock wait timeout exceeded"))
	if ctx.Err() != nil {
		t.Fatal("a transient save failure ended the session")
	}
	if err := end(); err != nil {
		t.Fatalf("end = %v", err)
	}
	// An unreachable writer ends it as a lost stream: the daemon reconnects.
	ctx, end = f.session(context.Background())
	f.report(fmt.Errorf("save: %w: dial tcp: refused", checkpoint.ErrUnreachable))
	if ctx.Err() == nil {
		t.Fatal("an unreachable writer did not end the session")
	}
	if err := end(); !errors.Is(err, binlog.ErrDisconnected) || !errors.Is(err, checkpoint.ErrUnreachable) {
		t.Fatalf("end = %v, want a disconnect", err)
	}
	// A misconfigured store ends it with its own error: fatal.
	ctx, end = f.session(context.Background())
	f.report(fmt.Errorf("save: %w: UPDATE denied", checkpoint.ErrStoreMisconfigured))
	if err := end(); ctx.Err() == nil || errors.Is(err, binlog.ErrDisconnected) || !errors.Is(err, checkpoint.ErrStoreMisconfigured) {
		t.Fatalf("end = %v, want the store's error", err)
	}
	// A failure between sessions, or a shutdown, ends nothing.
	f.report(fmt.Errorf("%w", checkpoint.ErrUnreachable))
	parent, cancel := context.WithCancel(context.Background())
	_, end = f.session(parent)
	cancel()
	if err := end(); err != nil {
		t.Fatalf("end after shutdown = %v", err)
	}
}
