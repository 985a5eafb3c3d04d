//go:build !linux

package main

import "os/exec"

// setPdeathsig is a no-op outside Linux. The harness reads /proc and only measures on Linux.
func setPdeathsig(cmd *exec.Cmd) {}
