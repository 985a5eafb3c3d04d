package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkafault"
	"github.com/outboxd/outboxd/testenv/kafkatap"
)

const (
	kafkaTopic = "chaos_k"
	rmqTopic   = "CHAOS_R"
	schema     = "chaos"
	// outboxTable is the outbox table the generators write and outboxd reads.
	outboxTable = schema + ".outbox_event"
)

// kafka is a kfake broker on a fixed port behind a fault proxy, restartable with its data.
type kafka struct {
	realPort int
	proxy    *faultproxy.Proxy
	tap      *kafkatap.Tap // records what each client sent through proxy
	dataDir  string
	log      *os.File // kfake's warnings (a failed segment write), across restarts

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

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func newKafka(dataDir string) (*kafka, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tap, err := kafkatap.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	p := tap.Proxy
	k := &kafka{realPort: port, proxy: p, tap: tap, dataDir: dataDir}
	if lf, err := os.OpenFile(dataDir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		k.log = lf
	}
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
	// kfake advertises the proxy's address in metadata: every Kafka client then reaches the
	// broker through the proxy.
	adv, err := kafkatap.Advertise(k.proxy.Addr())
	if err != nil {
		return err
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(k.realPort), kfake.DataDir(k.dataDir), kfake.SyncWrites(), adv}
	if k.log != nil {
		opts = append(opts, kfake.WithLogger(kfake.BasicLogger(k.log, kfake.LogLevelWarn)))
	}
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

// createTopic creates a topic on the running broker.
func (k *kafka) createTopic(topic string, partitions int32, configs map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c == nil {
		return fmt.Errorf("create topic %s: the broker is down", topic)
	}
	return k.c.CreateTopic(topic, partitions, configs)
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
	kafkafault.FailProduces(c, n, code)
	return true
}

func (k *kafka) close() {
	k.stop()
	k.proxy.Close()
	if k.log != nil {
		k.log.Close()
	}
}

// outboxd runs one instance of the built binary and restarts it on demand. In the HA world
// there are several, each with its own MariaDB proxy and admin address.
type outboxd struct {
	name     string
	bin, cfg string
	logPath  string
	admin    string              // admin.listen ("" in the single-instance world)
	clientID string              // its Kafka client id (the tap attributes produces by it)
	myPx     *faultproxy.Proxy   // its path to MariaDB (with a pair: to the primary, for checkpoint.writer_addr)
	srcPx    []*faultproxy.Proxy // with a pair: its source.addrs, one proxy per server
	logf     func(string, ...any)
	// runs gets a run at every start when it is set (the single-instance world, where a start
	// is a new sender); the HA world records leadership terms instead.
	runs *runLog

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped by a fault
	wanted  bool // false while we stopped it on purpose
	// unexpected counts exits we did not cause; superseded counts exits that said
	// "superseded" (expected of a leader that was paused or cut off and woke after a takeover).
	unexpected, superseded int
	lastExit               string
}

// epoch is one run of a sender: a start of the only outboxd, or a leadership term.
type epoch struct {
	Start time.Time `json:"start"`
	// After is what ended the previous run: "", "kill9", "sigterm", "exit", or the HA fault
	// kind that caused the takeover.
	After string `json:"after"`
}

// runLog is the list of runs, shared by the instances and the fault injector.
type runLog struct {
	mu     sync.Mutex
	epochs []epoch
}

func (r *runLog) add(at time.Time, after string) {
	r.mu.Lock()
	r.epochs = append(r.epochs, epoch{Start: at, After: after})
	r.mu.Unlock()
}

func (r *runLog) snapshot() []epoch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]epoch(nil), r.epochs...)
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
	from, _ := lf.Seek(0, io.SeekEnd)
	cmd := exec.Command(o.bin, "run", "--config", o.cfg)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start outboxd %s: %w", o.name, err)
	}
	done := make(chan struct{})
	o.cmd, o.done, o.wanted, o.stopped = cmd, done, true, false
	if o.runs != nil {
		o.runs.add(time.Now(), after)
	}
	go func() {
		err := cmd.Wait()
		lf.Close()
		superseded := logSince(o.logPath, from, "superseded")
		o.mu.Lock()
		if o.wanted && o.cmd == cmd {
			if superseded {
				o.superseded++
			} else {
				o.unexpected++
				o.lastExit = fmt.Sprint(err)
			}
			o.cmd = nil
			o.logf("outboxd %s exited by itself: %v (superseded: %v)", o.name, err, superseded)
		}
		o.mu.Unlock()
		close(done)
	}()
	return nil
}

// logSince reports whether the log file holds s after offset from.
func logSince(path string, from int64, s string) bool {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return false
	}
	return bytes.Contains(b[from:], []byte(s))
}

// stop sends sig and waits for the exit (SIGKILL after 30 s). It reports whether the process
// exited within 30 s of sig.
func (o *outboxd) stop(sig syscall.Signal) bool {
	o.mu.Lock()
	cmd, done, stopped := o.cmd, o.done, o.stopped
	o.wanted = false
	o.cmd = nil
	o.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	if stopped && sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process cannot act on SIGTERM
	}
	select {
	case <-done:
		return true
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// freeze sends SIGSTOP (true) or SIGCONT (false) to the running process, if any.
func (o *outboxd) freeze(on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	if o.cmd.Process.Signal(sig) == nil {
		o.stopped = on
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

// mysqlProxies is every path of o to MariaDB.
func (o *outboxd) mysqlProxies() []*faultproxy.Proxy {
	return append([]*faultproxy.Proxy{o.myPx}, o.srcPx...)
}

func (o *outboxd) counts() (unexpected, superseded int, lastExit string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unexpected, o.superseded, o.lastExit
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
