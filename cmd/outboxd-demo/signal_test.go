package main

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// demoProc is the built demo binary running in a process group of its own, as a shell runs a
// foreground job: a Ctrl-C in the terminal is SIGINT to the whole group (the demo, and the
// MariaDB it started; outboxd has a group of its own).
type demoProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	line chan string
	done chan struct{}
	err  error
}

func startDemo(t *testing.T, demoBin, outboxdBin string) *demoProc {
	t.Helper()
	cmd := exec.Command(demoBin, "--outboxd", outboxdBin, "--every", "200ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &demoProc{cmd: cmd, line: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

func (p *demoProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitLine waits for an output line matching re and returns its submatches.
func (p *demoProc) waitLine(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.line:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-p.done:
			t.Fatalf("the demo exited (%v) before printing a line matching %s:\n%s", p.err, re, p.output())
		case <-timeout:
			t.Fatalf("no line matching %s within %s:\n%s", re, d, p.output())
		}
	}
}

// interrupt sends SIGINT to the demo's process group and returns its exit code.
func (p *demoProc) interrupt(t *testing.T) int {
	t.Helper()
	return p.signal(t, syscall.SIGINT)
}

// signal sends sig to the demo's process group and returns its exit code.
func (p *demoProc) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("the demo did not exit within 45s of %v:\n%s", sig, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// Ctrl-C ends the demo with exit 0, so `make demo`, which execs the built demo, reports no
// error; also while it is still starting. While it runs, the commands it prints for a newcomer
// work against the outboxd it started.
func TestDemoExitsZeroOnSIGINT(t *testing.T) {
	mariadb.RequireT(t)
	dir := t.TempDir()
	outboxdBin, demoBin := filepath.Join(dir, "outboxd"), filepath.Join(dir, "outboxd-demo")
	for bin, pkg := range map[string]string{outboxdBin: "../outboxd", demoBin: "."} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}

	t.Run("while streaming", func(t *testing.T) {
		p := startDemo(t, demoBin, outboxdBin)
		m := p.waitLine(t, regexp.MustCompile(`outboxd's config: (\S+); its admin server: http://(\S+) `), 60*time.Second)
		cfg, url := m[1], m[2]
		if got := p.waitLine(t, regexp.MustCompile(`try in another terminal: \S+ status --config (\S+)$`), 5*time.Second)[1]; got != cfg {
			t.Errorf("status --config %s, but the config is %s", got, cfg)
		}
		addr := p.waitLine(t, regexp.MustCompile(`or: \S+ status --addr (\S+)$`), 5*time.Second)
		if addr[1] != url {
			t.Errorf("status --addr %s but admin URL http://%s", addr[1], url)
		}
		p.waitLine(t, regexp.MustCompile(`\? means no commit time was known`), 5*time.Second)
		p.waitLine(t, regexp.MustCompile(`^kafka   \| order\.paid .*commit→consumer \S+`), 30*time.Second)
		p.waitLine(t, regexp.MustCompile(`^benefit \| processed order\.paid/`), 30*time.Second)
		for _, args := range [][]string{{"status", "--config", cfg}, {"status", "--addr", addr[1]}} {
			out, err := exec.Command(outboxdBin, args...).CombinedOutput()
			if err != nil || !regexp.MustCompile(`(?m)^source +mariadb \S+, connected$`).Match(out) {
				t.Errorf("the printed `outboxd %s`: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if code := p.interrupt(t); code != 0 {
			t.Fatalf("exit %d after SIGINT, want 0:\n%s", code, p.output())
		}
		out := p.output()
		if !strings.Contains(out, "demo    | stopping:") || !regexp.MustCompile(`outboxd \| .*stopped`).MatchString(out) {
			t.Errorf("no clean stop of the demo and of outboxd in the output:\n%s", out)
		}
		checkOrderlyStop(t, out)
	})

	// `timeout 300 make demo`, or a supervisor, sends SIGTERM to the whole group, which
	// MariaDB (unlike SIGINT) obeys at once: it runs in a group of its own, so the demo still
	// stops in order.
	t.Run("SIGTERM to the group", func(t *testing.T) {
		p := startDemo(t, demoBin, outboxdBin)
		p.waitLine(t, regexp.MustCompile(`^benefit \| processed order\.paid/`), 60*time.Second)
		if code := p.signal(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, p.output())
		}
		checkOrderlyStop(t, p.output())
	})

	t.Run("during start-up", func(t *testing.T) {
		p := startDemo(t, demoBin, outboxdBin)
		p.waitLine(t, regexp.MustCompile(`starting a throwaway MariaDB`), 30*time.Second)
		if code := p.interrupt(t); code != 0 {
			t.Fatalf("exit %d after SIGINT during start-up, want 0:\n%s", code, p.output())
		}
	})
}

// checkOrderlyStop checks that the signal reached the demo, not its MariaDB: the summary still
// reads the benefits from it, and outboxd stops without losing its source first.
func checkOrderlyStop(t *testing.T, out string) {
	t.Helper()
	sum := regexp.MustCompile(`stopping: \d+ events committed, \d+ received; (\d+) paid orders, (\d+) benefits granted`).FindStringSubmatch(out)
	if sum == nil || sum[1] == "0" || sum[1] != sum[2] {
		t.Errorf("the summary: %v, want as many benefits granted as paid orders (above 0):\n%s", sum, out)
	}
	if strings.Contains(out, "source connection lost") {
		t.Errorf("outboxd lost its source during the demo's stop (MariaDB got the signal too):\n%s", out)
	}
}
