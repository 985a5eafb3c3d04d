package serverproc

import (
	"os/exec"
	"syscall"
)

// SetPdeathsig makes the kernel SIGKILL the child when the thread that started it exits, so a
// test binary that dies (panic, timeout, kill -9) leaks no server. Go threads only exit when a
// goroutine locked to one ends without unlocking, which the test environments never do.
func SetPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
