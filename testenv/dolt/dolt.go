// Package dolt starts throwaway Dolt sql-servers on loopback for tests: Dolt is an independent,
// MySQL-compatible server written in Go that acts as a MySQL-flavor binlog primary (GTIDs on,
// ROW events, FULL row metadata), the only one that can run here, since MySQL itself cannot be
// installed. A server gets its own directory (data, Dolt's "home" with metrics and version checks
// off, config, log) and TCP port on 127.0.0.1; the child process is killed when the creating
// process dies (Linux), so a crashed test leaks no Dolt.
//
// The binary is built once into a cache by scripts/install-dolt.sh (`make deps`); Binary finds
// it there or at $OUTBOXD_DOLT.
package dolt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/internal/sqlident"
	"github.com/outboxd/outboxd/testenv/internal/serverproc"
)

// Version is the Go module version of github.com/dolthub/dolt/go that scripts/install-dolt.sh
// builds (Dolt 1.86.4); the cache directory is named after it.
const Version = "v0.40.5-0.20260424001550-011a27ff4303"

// StartTimeout bounds how long Start waits for a new server to accept connections when the
// caller's context has no earlier deadline.
const StartTimeout = 60 * time.Second

// stopTimeout bounds a graceful shutdown before Stop falls back to SIGKILL.
const stopTimeout = 20 * time.Second

// ServerID is the server_id Start gives every server.
const ServerID = 42

// Options configure a server. The zero value starts a binlogging server in a new temporary
// directory on a free port.
type Options struct {
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
}

// Server is a running (or stopped) throwaway Dolt sql-server. Methods are safe for concurrent
// use.
type Server struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // holds data/, root/ (DOLT_ROOT_PATH), config.yaml and server.log
	// StartedAt is when the server process was started. Dolt writes its own start time into
	// every binlog event header, so a binlog reader sees every transaction committed then.
	StartedAt time.Time

	bin  string
	mu   sync.Mutex
	proc *serverproc.Process
}

// CachePath is where scripts/install-dolt.sh puts the binary:
// ${OUTBOXD_CACHE:-$HOME/.cache/outboxd}/dolt-<Version>/dolt. Pure apart from reading the
// environment.
func CachePath() string {
	base := os.Getenv("OUTBOXD_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "outboxd")
	}
	return filepath.Join(base, "dolt-"+Version, "dolt")
}

// Binary locates the dolt binary: $OUTBOXD_DOLT when set (which must then exist), else
// CachePath. It does not block and is safe for concurrent use.
func Binary() (string, error) {
	if p := os.Getenv("OUTBOXD_DOLT"); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("OUTBOXD_DOLT=%s is not an executable file", p)
	}
	p := CachePath()
	if isExecutable(p) {
		return p, nil
	}
	return "", fmt.Errorf("dolt %s not found at %s: `make deps` (scripts/install-dolt.sh) builds it, or set OUTBOXD_DOLT", Version, p)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start starts a Dolt sql-server with binary logging on (log_bin, gtid_mode and
// enforce_gtid_consistency ON, server_id 42, binlog_row_metadata FULL; log_bin is only read at
// start) and blocks until root (no password) can run a query over TCP, ctx is done, or
// StartTimeout passes. On error no process is left running and its directory is removed. Safe
// for concurrent use (each call starts its own server).
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxd-dolt-")
	if err != nil {
		return nil, fmt.Errorf("dolt: create temp dir: %w", err)
	}
	s := &Server{bin: bin, Dir: dir}
	if err := s.prepare(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeout)
		defer cancel()
	}
	pick := o.Port == 0
	for attempt := 0; ; attempt++ {
		port := o.Port
		if pick {
			if port, err = serverproc.FreePort(); err != nil {
				err = fmt.Errorf("dolt: %w", err)
				break
			}
		}
		err = s.startOnce(ctx, port)
		// A port picked here can be taken between the probe and Dolt's bind: try another.
		if err == nil || !pick || !errors.Is(err, errPortInUse) || attempt == 4 {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// prepare writes Dolt's global config: no usage metrics and no version check (both would
// leave loopback), and a committer identity, which Dolt requires.
func (s *Server) prepare() error {
	if err := os.MkdirAll(filepath.Join(s.Dir, "root", ".dolt"), 0o755); err != nil {
		return fmt.Errorf("dolt: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "data"), 0o755); err != nil {
		return fmt.Errorf("dolt: %w", err)
	}
	global := `{"metrics.disabled":"true","versioncheck.disabled":"true","user.name":"outboxd-test","user.email":"outboxd-test@localhost"}`
	if err := os.WriteFile(filepath.Join(s.Dir, "root", ".dolt", "config_global.json"), []byte(global), 0o644); err != nil {
		return fmt.Errorf("dolt: write global config: %w", err)
	}
	return nil
}

func (s *Server) logPath() string { return filepath.Join(s.Dir, "server.log") }

// configYAML is the sql-server config; see https://docs.dolthub.com/sql-reference/server/configuration.
func (s *Server) configYAML(port int) string {
	return fmt.Sprintf(`log_level: info
listener:
  host: 127.0.0.1
  port: %d
  max_connections: 300
data_dir: %q
system_variables:
  log_bin: 1
  gtid_mode: "ON"
  enforce_gtid_consistency: "ON"
  server_id: %d
  binlog_row_metadata: "FULL"
`, port, filepath.Join(s.Dir, "data"), ServerID)
}

var errPortInUse = errors.New("port in use")

// startOnce starts the server on port and waits until it accepts queries.
func (s *Server) startOnce(ctx context.Context, port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("dolt: server already running")
	}
	cfgPath := filepath.Join(s.Dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(s.configYAML(port)), 0o644); err != nil {
		return fmt.Errorf("dolt: write config: %w", err)
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("dolt: open log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	logStart, _ := logf.Seek(0, 2)
	cmd := exec.Command(s.bin, "sql-server", "--config", cfgPath)
	cmd.Dir = filepath.Join(s.Dir, "data")
	cmd.Env = append(os.Environ(), "DOLT_ROOT_PATH="+filepath.Join(s.Dir, "root"), "DOLT_DISABLE_EVENT_FLUSH=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := serverproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("dolt: start %s: %w", s.bin, err)
	}
	s.StartedAt = time.Now()
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := serverproc.WaitSQL(ctx, s.config(""), p, "dolt"); err != nil {
		p.Kill()
		log := s.logSince(logStart)
		if strings.Contains(log, "address already in use") {
			return fmt.Errorf("dolt: port %d: %w: %w", port, errPortInUse, err)
		}
		return fmt.Errorf("dolt: start on port %d (dir %s): %w\nserver log:\n%s", port, s.Dir, err, log)
	}
	s.proc = p
	return nil
}

func (s *Server) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return serverproc.Tail(b[offset:], 4000)
}

// LogTail returns up to the last n bytes of the server's log, for failure reports. Safe for
// concurrent use.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return ""
	}
	return serverproc.Tail(b, n)
}

func (s *Server) config(db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr
	cfg.DBName = db
	_ = mysql.Charset("utf8mb4", "utf8mb4_general_ci")(cfg)
	cfg.ParseTime = true
	return cfg
}

// DB opens a pool as root (no password) on database db, creating the database first when db is
// not "" and it does not exist. It blocks until the server answered a ping. On error no pool is
// left open. Safe for concurrent use.
func (s *Server) DB(ctx context.Context, db string) (*sql.DB, error) {
	if db != "" {
		admin, err := s.DB(ctx, "")
		if err != nil {
			return nil, err
		}
		_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+sqlident.Quote(db))
		admin.Close()
		if err != nil {
			return nil, fmt.Errorf("dolt %s: create database %s: %w", s.Addr, db, err)
		}
	}
	s.mu.Lock()
	connector, err := mysql.NewConnector(s.config(db))
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("dolt %s: %w", s.Addr, err)
	}
	pool := sql.OpenDB(connector)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("dolt %s: ping: %w", s.Addr, err)
	}
	return pool, nil
}

// Stop shuts the server down with SIGTERM and waits for it to exit, sending SIGKILL after
// stopTimeout. Stopping a stopped server is a no-op. Safe for concurrent use.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	if err := p.Stop(stopTimeout); err != nil {
		return fmt.Errorf("dolt %s: %w", s.Addr, err)
	}
	return nil
}

// Close stops the server and removes its directory. It blocks until the process exited; the
// directory is removed even when the stop reported an error.
func (s *Server) Close() error {
	err := s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = os.RemoveAll(s.Dir)
	return err
}
