// Package scripts holds the tests of the install scripts; it has no Go code of its own.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fakeBin puts an apt-get (recording its arguments) and a sudo (running its command) first on
// PATH and returns that PATH and the file apt-get writes to.
func fakeBin(t *testing.T) (path, calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("apt-get", `echo "apt-get $*" >> "`+calls+`"`+"\n")
	write("sudo", `exec "$@"`+"\n")
	return dir + ":" + os.Getenv("PATH"), calls
}

func runApt(t *testing.T, env []string, args string) (stderr, calls string) {
	t.Helper()
	path, callFile := fakeBin(t)
	cmd := exec.Command("bash", "-c", `set -euo pipefail; . ./apt.sh; apt_get `+args)
	cmd.Env = append(append(os.Environ(), "PATH="+path), env...)
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("apt_get %s: %v\n%s", args, err, errb.String())
	}
	b, err := os.ReadFile(callFile)
	if err != nil {
		t.Fatal(err)
	}
	return errb.String(), string(b)
}

// apt_get waits for apt's lock (apt-get's DPkg::Lock::Timeout) instead of failing at once
// when another package manager holds it, and says nothing while no one holds it.
func TestAptGetWaitsForTheLock(t *testing.T) {
	stderr, calls := runApt(t, []string{"OUTBOXD_APT_LOCKS=" + filepath.Join(t.TempDir(), "no-lock")}, "install -y -qq mariadb-server")
	if calls != "apt-get -o DPkg::Lock::Timeout=600 install -y -qq mariadb-server\n" {
		t.Fatalf("apt-get ran as %q, want it to wait 600 s for the lock", calls)
	}
	if stderr != "" {
		t.Fatalf("a lock no one holds printed %q", stderr)
	}
}

// While a process holds the lock, apt_get names it and how long it waits, before waiting.
func TestAptGetNamesTheLockHolder(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "lock-frontend")
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// dpkg and apt take a POSIX (fcntl) write lock on the whole file, as here.
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	stderr, calls := runApt(t, []string{"OUTBOXD_APT_LOCKS=" + lock, "OUTBOXD_APT_LOCK_TIMEOUT=30"}, "update -qq")
	if calls != "apt-get -o DPkg::Lock::Timeout=30 update -qq\n" {
		t.Fatalf("apt-get ran as %q", calls)
	}
	want := "apt-get update: apt's lock is held by process " + strconv.Itoa(os.Getpid()) + " ("
	if !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "waiting up to 30s") {
		t.Fatalf("stderr %q, want it to start with %q and say how long it waits", stderr, want)
	}
}

// Every apt-get of the install scripts goes through apt_get, so none fails on a held lock.
func TestInstallScriptsUseAptGet(t *testing.T) {
	scripts, err := filepath.Glob("*.sh")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	bare := regexp.MustCompile(`(?m)^[^#\n]*\bapt-get\s`)
	for _, s := range scripts {
		if s == "apt.sh" {
			continue
		}
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if m := bare.Find(b); m != nil {
			t.Errorf("%s runs apt-get without apt_get (scripts/apt.sh), which fails at once on a held lock: %q", s, m)
		}
	}
}
