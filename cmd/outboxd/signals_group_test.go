package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// signalsHelperEnv makes the test binary a stand-in for outboxd run: it handles signals as
// main does, prints "ready", and on the first stop signal drains for OUTBOXD_SIGNALS_DRAIN
// before exiting 0 (a forced exit is exitForced, from the handler).
const signalsHelperEnv = "OUTBOXD_SIGNALS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(signalsHelperEnv) == "1" {
		drain, err := time.ParseDuration(os.Getenv("OUTBOXD_SIGNALS_DRAIN"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		sig := handleSignals(os.Stderr, os.Exit)
		fmt.Println("ready")
		<-sig.ctx.Done()
		time.Sleep(drain)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startSignalsHelper starts the helper in a process group of its own, as a supervisor such as
// GNU timeout runs its command, and returns once its signal handler is installed.
func startSignalsHelper(t *testing.T, drain time.Duration) (*exec.Cmd, *strings.Builder, *sync.Mutex) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), signalsHelperEnv+"=1", "OUTBOXD_SIGNALS_DRAIN="+drain.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var logs strings.Builder
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	return cmd, &logs, &mu
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func exitStatus(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatal("the helper did not exit")
		return -1
	}
}

// GNU timeout sends its signal to the command and then to the command's process group: one
// SIGTERM, delivered twice. It is one stop (a graceful drain, exit 0), not a second signal
// that forces exit 3; a SIGTERM sent after the window still forces.
func TestSignalToProcessAndGroupIsOneStop(t *testing.T) {
	for i := range 3 {
		cmd, logs, mu := startSignalsHelper(t, 800*time.Millisecond)
		pid := cmd.Process.Pid
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // two deliveries, not one coalesced pending signal
		if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := exitStatus(t, cmd); code != 0 {
			mu.Lock()
			t.Fatalf("run %d: SIGTERM to the process and to its group exited %d, want 0 (one graceful stop):\n%s", i, code, logs.String())
		}
	}

	cmd, logs, mu := startSignalsHelper(t, 5*time.Second)
	pid := cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(sameSignalWindow + 200*time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, cmd); code != exitForced {
		mu.Lock()
		t.Fatalf("a second SIGTERM after %s exited %d, want %d:\n%s", sameSignalWindow, code, exitForced, logs.String())
	}
}
