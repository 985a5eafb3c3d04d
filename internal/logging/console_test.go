package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rs/zerolog"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Console lines carry colour codes only on a terminal, or with FORCE_COLOR; never with
// NO_COLOR (https://no-color.org), and never into a file or a pipe.
func TestConsoleColourOnlyOnATerminal(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	tty := openPTY(t)
	cases := []struct {
		name string
		w    *os.File
		env  map[string]string
		want bool
	}{
		{"file", file, nil, false},
		{"pipe", pw, nil, false},
		{"terminal", tty, nil, true},
		{"terminal with NO_COLOR", tty, map[string]string{"NO_COLOR": "1"}, false},
		{"file with FORCE_COLOR", file, map[string]string{"FORCE_COLOR": "1"}, true},
		{"NO_COLOR wins over FORCE_COLOR", tty, map[string]string{"NO_COLOR": "1", "FORCE_COLOR": "1"}, false},
		{"empty NO_COLOR is unset", tty, map[string]string{"NO_COLOR": ""}, true},
	}
	for _, c := range cases {
		if got := Colour(c.w, env(c.env)); got != c.want {
			t.Errorf("%s: Colour = %v, want %v", c.name, got, c.want)
		}
	}
	if Colour(&bytes.Buffer{}, env(nil)) {
		t.Error("a buffer is not a terminal")
	}

	var buf bytes.Buffer
	l := New(Console(&buf, env(nil)), zerolog.InfoLevel)
	l.Warn().Str("sink", "main").Msg("plain")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "WRN plain sink=main") {
		t.Errorf("console line into a buffer: %q, want it without colour codes", buf.String())
	}
	buf.Reset()
	l = New(Console(&buf, env(map[string]string{"FORCE_COLOR": "1"})), zerolog.InfoLevel)
	l.Warn().Msg("forced")
	if !strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("FORCE_COLOR: %q, want colour codes", buf.String())
	}
}

// openPTY opens the follower side of a new pseudo-terminal (Linux /dev/ptmx).
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}
