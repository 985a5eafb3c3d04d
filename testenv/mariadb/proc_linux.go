package mariadb

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL the child when the thread that started it exits, so a
// test binary that dies (panic, timeout, kill -9) leaks no mariadbd. Go threads only exit when a
// goroutine locked to one ends without unlocking, which this package never does.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
