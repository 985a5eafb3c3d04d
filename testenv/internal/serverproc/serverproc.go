// Package serverproc runs the throwaway database servers of the test environments (mariadbd,
// dolt sql-server): a child the kernel kills when the test process dies (Linux), waited on in
// the background, polled until it answers SQL, and stopped with SIGTERM, then SIGKILL.
package serverproc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Process is a started server process. Methods are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result; read only after done is closed
}

// Start starts cmd with SetPdeathsig and waits for it in the background. It does not block.
func Start(cmd *exec.Cmd) (*Process, error) {
	SetPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; call it only after Done is closed.
func (p *Process) Err() error { return p.err }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and blocks until the process has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and blocks until the process has exited, sending SIGKILL after timeout
// (then the error says so). A process that already exited, or a nil one (a server stopped
// before), is no error.
func (p *Process) Stop(timeout time.Duration) error {
	if p == nil || !p.Running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.Kill()
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("did not stop within %s of SIGTERM; killed", timeout)
	}
}

// WaitSQL polls every 25 ms until cfg's account can run a query, the process exits, or ctx is
// done; name is the server's name for the errors.
func WaitSQL(ctx context.Context, cfg *mysql.Config, p *Process, name string) error {
	return WaitOwnSQL(ctx, cfg, p, name, nil)
}

// WaitOwnSQL is WaitSQL that also runs ours on each connection that answers: an error from it
// (the server answering on the port is not the one started, which lost the port to it) keeps it
// waiting, until the process exits (failing to bind) or ctx ends.
func WaitOwnSQL(ctx context.Context, cfg *mysql.Config, p *Process, name string, ours func(context.Context, *sql.DB) error) error {
	cfg = cfg.Clone()
	cfg.Timeout = time.Second
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("build DSN: %w", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var one int
		err := db.QueryRowContext(pctx, "SELECT 1").Scan(&one)
		if err == nil && ours != nil {
			err = ours(pctx, db)
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before accepting connections: %v", name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections (last error: %v): %w", lastErr, ctx.Err())
		case <-tick.C:
		}
	}
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago: a server started on it can
// still lose it to another process, so callers retry with another on "address in use".
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// Tail returns up to the last n bytes of b as text.
func Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
