package binlog

import (
	"errors"
	"fmt"
	"testing"
)

// Error is the short problem; the fix stays out of it and is found through any wrapping.
func TestStopErrorKeepsTheFixApart(t *testing.T) {
	sentinel := errors.New("sentinel")
	cases := []struct {
		err  *StopError
		want string
	}{
		{&StopError{Table: "shop.outbox", GTID: "0-1-5", Problem: "transaction 0-1-5 is bad", Fix: "set x=FULL"},
			"outbox table shop.outbox: transaction 0-1-5 is bad"},
		{&StopError{Problem: "server s refused", Fix: "grant it", Err: sentinel}, "server s refused: sentinel"},
		{&StopError{Table: "shop.outbox", Fix: "set y", Err: sentinel}, "outbox table shop.outbox: sentinel"},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("stream: %w", c.err)
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if FixOf(wrapped) != c.err.Fix {
			t.Errorf("FixOf(%v) = %q, want %q", wrapped, FixOf(wrapped), c.err.Fix)
		}
		if (c.err.Err != nil) != errors.Is(wrapped, sentinel) {
			t.Errorf("errors.Is(%v, sentinel) = %v", wrapped, errors.Is(wrapped, sentinel))
		}
	}
	if FixOf(sentinel) != "" || FixOf(nil) != "" {
		t.Error("FixOf of an error that is no StopError is not empty")
	}
}
