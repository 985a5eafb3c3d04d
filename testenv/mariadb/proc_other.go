//go:build !linux

package mariadb

import "os/exec"

// setPdeathsig is a no-op outside Linux: there the caller must Close the server.
func setPdeathsig(cmd *exec.Cmd) {}
