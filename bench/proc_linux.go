package main

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL outboxd when the harness thread that started it exits, so
// a harness killed by a timeout or a signal leaks no outboxd.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
