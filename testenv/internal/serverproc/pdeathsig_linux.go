package serverproc

import (
	"os/exec"
	"syscall"
)

// SetPdeathsig makes the kernel SIGKILL the child when the thread that started it exits, so a
// test binary that dies (panic, timeout, kill -9) leaks no server. Go threads only exit when a
// goroutine locked to one ends without unlocking, which the test environments never do.
//
// The child also gets a process group of its own: a Ctrl-C in a terminal is SIGINT to the
// whole foreground group, and a server in it would die at once, before the program that
// started it (`make demo`) has stopped what uses it and read its last figures from it.
func SetPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
