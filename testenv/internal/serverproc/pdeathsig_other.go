//go:build !linux

package serverproc

import "os/exec"

// SetPdeathsig is a no-op outside Linux: there the caller must stop the server.
func SetPdeathsig(cmd *exec.Cmd) {}
