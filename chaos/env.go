package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkafault"
)

const (
	kafkaTopic = "chaos_k"
	rmqTopic   = "CHAOS_R"
	schema     = "chaos"
)

// advertised wraps a listener so kfake advertises the fault proxy's address in metadata: every
// Kafka client then reaches the broker through the proxy.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// kafka is a kfake broker on a fixed port behind a fault proxy, restartable with its data.
type kafka struct {
	realPort int
	proxy    *faultproxy.Proxy
	dataDir  string

	mu sync.Mutex
	c  *kfake.Cluster // nil while down
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func newKafka(dataDir string) (*kafka, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	k := &kafka{realPort: port, proxy: p, dataDir: dataDir}
	if err := k.start(true); err != nil {
		p.Close()
		return nil, err
	}
	return k, nil
}

func (k *kafka) realAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(k.realPort)) }

// start (re)starts the broker on its port with its data; it retries while the port is still
// held by the previous instance (up to 15 s).
func (k *kafka) start(seed bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		return nil
	}
	padv, err := net.ResolveTCPAddr("tcp", k.proxy.Addr())
	if err != nil {
		return fmt.Errorf("kafka proxy address: %w", err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(k.realPort), kfake.DataDir(k.dataDir), kfake.SyncWrites(),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			return advertised{Listener: ln, addr: padv}, nil
		})}
	if seed {
		opts = append(opts, kfake.SeedTopics(3, kafkaTopic))
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := kfake.NewCluster(opts...)
		if err == nil {
			k.c = c
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start kfake on port %d: %w", k.realPort, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (k *kafka) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// failProduces makes the next n produce requests answer code for every partition (nothing is
// stored), then lets requests through again.
func (k *kafka) failProduces(n int, code int16) bool {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	if c == nil {
		return false
	}
	remaining := n
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if remaining <= 0 {
			return nil, nil, false
		}
		remaining--
		if remaining > 0 {
			c.KeepControl()
		}
		resp := kafkafault.ProduceError(req.(*kmsg.ProduceRequest), code)
		return resp, nil, true
	})
	return true
}

func (k *kafka) close() {
	k.stop()
	k.proxy.Close()
}

// outboxd runs the built binary and restarts it on demand. It keeps one epoch per start.
type outboxd struct {
	bin, cfg string
	logPath  string
	logf     func(string, ...any)

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	wanted bool // false while we stopped it on purpose
	epochs []epoch
	// unexpected counts exits we did not cause.
	unexpected int
	lastExit   string
}

// epoch is one run of outboxd.
type epoch struct {
	Start time.Time `json:"start"`
	// After is what ended the previous run: "", "kill9", "sigterm", "exit".
	After string `json:"after"`
}

func (o *outboxd) start(after string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd != nil {
		return nil
	}
	lf, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("outboxd log: %w", err)
	}
	cmd := exec.Command(o.bin, "run", "--config", o.cfg)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start outboxd: %w", err)
	}
	done := make(chan struct{})
	o.cmd, o.done, o.wanted = cmd, done, true
	o.epochs = append(o.epochs, epoch{Start: time.Now(), After: after})
	go func() {
		err := cmd.Wait()
		lf.Close()
		o.mu.Lock()
		if o.wanted && o.cmd == cmd {
			o.unexpected++
			o.lastExit = fmt.Sprint(err)
			o.cmd = nil
			o.logf("outboxd exited by itself: %v", err)
		}
		o.mu.Unlock()
		close(done)
	}()
	return nil
}

// stop sends sig and waits for the exit (SIGKILL after 30 s). It reports whether the process
// exited within 30 s of sig.
func (o *outboxd) stop(sig syscall.Signal) bool {
	o.mu.Lock()
	cmd, done := o.cmd, o.done
	o.wanted = false
	o.cmd = nil
	o.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// ensure restarts outboxd if it exited by itself.
func (o *outboxd) ensure() error {
	o.mu.Lock()
	running := o.cmd != nil
	o.mu.Unlock()
	if running {
		return nil
	}
	return o.start("exit")
}

func (o *outboxd) snapshot() ([]epoch, int, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]epoch(nil), o.epochs...), o.unexpected, o.lastExit
}

// buildOutboxd builds cmd/outboxd into dir.
func buildOutboxd(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "outboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/outboxd")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/outboxd: %w\n%s", err, out.String())
	}
	return bin, nil
}

// moduleRoot finds go.mod from the working directory up.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above the working directory: run from the outboxd repository")
		}
		d = up
	}
}
