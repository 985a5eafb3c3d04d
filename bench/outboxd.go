package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildOutboxd builds ./cmd/outboxd into dir and returns the binary's path. It blocks for the build.
func buildOutboxd(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "outboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/outboxd")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/outboxd: %w\n%s", err, out)
	}
	return bin, nil
}

// relayConfig is what the generated outboxd YAML needs.
type relayConfig struct {
	Addr     string // MariaDB host:port
	ServerID int
	Start    string // GTID set
	Table    string // schema.table
	Sink     string // the sinks: entry's YAML flow map
	Topic    string
	Dir      string // checkpoint and logs
	// CheckpointInterval is checkpoint.interval ("" is the bench's 1s).
	CheckpointInterval string
	// Delivery, when set, is the top-level YAML of another delivery mode (delivery: and its
	// checkpoint: line, see eosSink.deliveryYAML); it replaces the file checkpoint line.
	Delivery string
	Extra    string // appended verbatim (e.g. a pipeline: block), may be ""
}

func (c relayConfig) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "source:\n  flavor: mariadb\n  addr: %s\n  user: root\n  password: \"\"\n  server_id: %d\n  start: %q\n",
		c.Addr, c.ServerID, c.Start)
	fmt.Fprintf(&b, "tables:\n  - table: %s\n", c.Table)
	fmt.Fprintf(&b, "sinks:\n  out: %s\n", c.Sink)
	fmt.Fprintf(&b, "routes:\n  - sink: out\n    topic: %q\n", c.Topic)
	iv := c.CheckpointInterval
	if iv == "" {
		iv = "1s"
	}
	if c.Delivery != "" {
		b.WriteString(strings.TrimRight(c.Delivery, "\n") + "\n")
	} else {
		fmt.Fprintf(&b, "checkpoint: {path: %s, interval: %s}\n", filepath.Join(c.Dir, "checkpoint.json"), iv)
	}
	b.WriteString("log: {level: info, format: json}\n")
	if c.Extra != "" {
		b.WriteString(strings.TrimRight(c.Extra, "\n") + "\n")
	}
	return b.String()
}

// outboxdProc is outboxd (or the floor relay) running as a child process.
type outboxdProc struct {
	cmd     *exec.Cmd
	name    string
	log     string
	started time.Time
	done    chan struct{}
	err     error // Wait's result; read after done
}

// startOutboxd writes the config into c.Dir and starts `outboxd run`, its output going to
// c.Dir/outboxd.log. The child is killed if the harness dies. It does not wait for readiness.
func startOutboxd(bin string, c relayConfig) (*outboxdProc, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(c.Dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(c.yaml()), 0o600); err != nil {
		return nil, fmt.Errorf("write outboxd config: %w", err)
	}
	p, err := startChild(exec.Command(bin, "run", "--config", cfgPath), filepath.Join(c.Dir, "outboxd.log"), "outboxd")
	if err != nil {
		return nil, fmt.Errorf("start outboxd: %w", err)
	}
	return p, nil
}

// startChild starts cmd (outboxd or the floor relay, named name in errors) with its output going
// to logPath, killed if the harness dies. It does not wait for readiness.
func startChild(cmd *exec.Cmd, logPath, name string) (*outboxdProc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	setPdeathsig(cmd)
	p := &outboxdProc{cmd: cmd, name: name, log: logPath, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p.started = time.Now()
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *outboxdProc) pid() int { return p.cmd.Process.Pid }

// exited returns a non-nil error (with the log's tail) when the process has already ended.
func (p *outboxdProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited early (%v); log tail:\n%s", p.name, p.err, p.logTail(3000))
	default:
		return nil
	}
}

func (p *outboxdProc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// stop sends SIGTERM and waits up to timeout for a clean exit, then SIGKILLs. Stopping a stopped
// process is a no-op. It returns an error when the exit was not clean.
func (p *outboxdProc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if p.err != nil && !errors.As(p.err, &ee) {
			return p.err
		}
		if p.err != nil {
			return fmt.Errorf("%s exited with %w after SIGTERM; log tail:\n%s", p.name, p.err, p.logTail(2000))
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.name, timeout)
	}
}
