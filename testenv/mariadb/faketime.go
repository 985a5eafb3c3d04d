package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FakeClock runs a server on a clock offset from this host's, through libfaketime (Debian's
// faketime package): preloaded into mariadbd, it shifts the C library's clock calls, so the
// server's NOW(), the created_at its DEFAULT CURRENT_TIMESTAMP writes and its binlog timestamps
// all follow the offset. A Go program cannot be faked this way (its runtime reads the clock
// through the vDSO, not the C library), so the test and the outboxd it runs keep this host's
// clock: the skew is the database's against outboxd's. The offset lives in a file libfaketime
// reads again every second, so Set moves a running server's clock (a jump). Methods are safe
// for concurrent use.
type FakeClock struct {
	lib, path string
}

// fakeClockReread is how often (seconds) libfaketime reads the offset file again: the longest a
// Set takes to reach the server.
const fakeClockReread = 1

// FakeTimeLib locates libfaketimeMT.so.1 (the thread-safe variant, for mariadbd's threads) where
// the faketime packages of Debian and Ubuntu, or a build from source, put it. It does not block.
func FakeTimeLib() (string, error) {
	var cands []string
	for _, pat := range []string{"/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/lib64/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1"} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	for _, p := range cands {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("libfaketimeMT.so.1 not found in /usr/lib/*/faketime or /usr/local/lib/faketime: apt-get install -y faketime")
}

// NewFakeClock writes the offset file in dir (which must outlive the server) and returns the
// clock; pass its Env in Options.Env. It does not block.
func NewFakeClock(dir string, offset time.Duration) (*FakeClock, error) {
	lib, err := FakeTimeLib()
	if err != nil {
		return nil, err
	}
	c := &FakeClock{lib: lib, path: filepath.Join(dir, "faketimerc")}
	if err := c.Set(offset); err != nil {
		return nil, err
	}
	return c, nil
}

// Env is the environment that starts mariadbd on this clock.
func (c *FakeClock) Env() []string {
	return []string{
		"LD_PRELOAD=" + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.path,
		fmt.Sprintf("FAKETIME_CACHE_DURATION=%d", fakeClockReread),
		// Only the wall clock moves: InnoDB's and the replication threads' timeouts run on the
		// monotonic clock, which a jump would otherwise fire or stall.
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// Set moves the clock to offset from this host's (whole seconds), for a running server within
// about a second (libfaketime's re-read; poll ClockOffset to know it arrived). The file is
// replaced by a rename, so a read never sees half of it. It does not block.
func (c *FakeClock) Set(offset time.Duration) error {
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+d\n", int64(offset/time.Second)), 0o644); err != nil {
		return fmt.Errorf("mariadb: fake clock: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("mariadb: fake clock: %w", err)
	}
	return nil
}

// ClockOffset is the server's clock (NOW(6) as an instant) minus this host's, measured at the
// middle of the query's round trip. It blocks on one query.
func ClockOffset(ctx context.Context, db *sql.DB) (time.Duration, error) {
	before := time.Now()
	var s float64
	if err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&s); err != nil {
		return 0, fmt.Errorf("mariadb: read the server's clock: %w", err)
	}
	after := time.Now()
	mid := before.Add(after.Sub(before) / 2)
	return time.UnixMicro(int64(s * 1e6)).Sub(mid), nil
}
