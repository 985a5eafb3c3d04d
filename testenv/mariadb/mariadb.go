// Package mariadb starts throwaway MariaDB servers (mariadbd) on loopback for tests and the
// no-Docker demo. A server gets its own datadir, socket and TCP port; binary logging is on with GTIDs
// and row events configured the way outboxd needs them. The child process is killed when the
// creating process dies (Linux), so a crashed test leaks no mariadbd.
package mariadb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
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

// StartTimeout bounds how long Start waits for a new server to accept connections when the
// caller's context has no earlier deadline.
const StartTimeout = 60 * time.Second

// stopTimeout bounds a graceful shutdown before Stop falls back to SIGKILL.
const stopTimeout = 30 * time.Second

// Options configure a server. The zero value starts a ROW-format, FULL-metadata server in a new
// temporary directory on a free port.
type Options struct {
	// Dir is where the server's files live (datadir in Dir/data, socket, error log). "" creates a
	// temporary directory that Close removes. A given Dir is kept by Close and, when it already
	// holds an initialized datadir, reused as is (the demo keeps its data across runs).
	Dir string
	// RowMetadata is binlog_row_metadata: "FULL" (default) or "MINIMAL".
	RowMetadata string
	// BinlogFormat is binlog_format: "ROW" (default), "STATEMENT" or "MIXED".
	BinlogFormat string
	// ExtraArgs are appended after the built-in server flags, so they override them.
	ExtraArgs []string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Log receives the server's error log (stderr). nil writes it to error.log in Dir.
	Log io.Writer
	// Env are more KEY=VALUE variables for mariadbd, after this process's environment (so
	// they override it): FakeClock.Env runs the server on a clock offset from this host's.
	Env []string
}

// Server is a running (or stopped) throwaway mariadbd. Methods are safe for concurrent use.
type Server struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // holds data/, the socket and error.log

	bin        string
	ownDir     bool   // Dir was created by Start and is removed by Close
	sockDir    string // separate short directory for the socket when Dir is too long, else ""
	mu         sync.Mutex
	proc       *serverproc.Process
	lastStderr *tailBuffer
	errLogPath string // "" when the error log goes to Options.Log
}

// Binary locates mariadbd: on PATH, then /usr/sbin, /usr/libexec, /usr/local/sbin,
// /usr/local/mysql/bin. It does not block and is safe for concurrent use.
func Binary() (string, error) {
	if p, err := exec.LookPath("mariadbd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mariadbd", "/usr/libexec/mariadbd", "/usr/local/sbin/mariadbd", "/usr/local/mysql/bin/mariadbd", "/usr/local/bin/mariadbd"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mariadbd not found on PATH or in /usr/sbin, /usr/libexec: apt-get install -y mariadb-server")
}

// installDB locates mariadb-install-db next to mariadbd's usual places.
func installDB(bin string) (string, error) {
	if p, err := exec.LookPath("mariadb-install-db"); err == nil {
		return p, nil
	}
	dir := filepath.Dir(bin)
	for _, p := range []string{
		filepath.Join(dir, "mariadb-install-db"),
		filepath.Join(filepath.Dir(dir), "bin", "mariadb-install-db"),
		filepath.Join(filepath.Dir(dir), "scripts", "mariadb-install-db"),
		"/usr/bin/mariadb-install-db", "/usr/local/bin/mariadb-install-db",
	} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mariadb-install-db not found (it ships with mariadb-server): apt-get install -y mariadb-server")
}

// Start initializes a datadir (unless Options.Dir already holds one) and starts mariadbd. It blocks
// until the server accepts connections as root over TCP, ctx is done, or StartTimeout passes. On
// error no server process is left running and a directory it created is removed. Safe for
// concurrent use (each call starts its own server).
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "outboxd-mariadb-")
		if err != nil {
			return nil, fmt.Errorf("mariadb: create temp dir: %w", err)
		}
		s.Dir, s.ownDir = d, true
	} else {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("mariadb: create dir %s: %w", o.Dir, err)
		}
		abs, err := filepath.Abs(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("mariadb: dir %s: %w", o.Dir, err)
		}
		s.Dir = abs
	}
	fail := func(err error) (*Server, error) {
		s.cleanupFiles()
		return nil, err
	}
	// A Unix socket path must fit in sun_path (108 bytes); t.TempDir paths can be longer.
	if len(filepath.Join(s.Dir, "mysqld.sock")) > 100 {
		d, err := os.MkdirTemp("", "mdb")
		if err != nil {
			return fail(fmt.Errorf("mariadb: create socket dir: %w", err))
		}
		s.sockDir = d
	}
	if err := s.initDatadir(ctx); err != nil {
		return fail(err)
	}
	if err := s.startLoop(ctx, o); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

func (s *Server) socket() string {
	if s.sockDir != "" {
		return filepath.Join(s.sockDir, "mysqld.sock")
	}
	return filepath.Join(s.Dir, "mysqld.sock")
}

// cleanupFiles removes what Start created; only called when no process runs.
func (s *Server) cleanupFiles() {
	if s.sockDir != "" {
		_ = os.RemoveAll(s.sockDir)
	}
	if s.ownDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// initDatadir fills the datadir unless it already holds the system tables: from a template
// directory in os.TempDir, shared by every process on the machine and keyed by the mariadbd binary
// and init flags (copying takes a fraction of mariadb-install-db's time, which dominates a start
// on a loaded machine), else by running mariadb-install-db directly.
func (s *Server) initDatadir(ctx context.Context) error {
	if initialized(s.dataDir()) {
		return nil
	}
	tmpl, err := s.template(ctx)
	if err == nil {
		if err := os.CopyFS(s.dataDir(), os.DirFS(tmpl)); err == nil && initialized(s.dataDir()) {
			return nil
		}
		// A broken template must not fail the start: fall back to a fresh init.
		_ = os.RemoveAll(s.dataDir())
	}
	return s.installDB(ctx, s.dataDir())
}

// initArgs returns the mariadb-install-db flags after --datadir; part of the template key.
func initArgs() []string {
	return []string{
		"--user=root",
		// normal creates root@localhost, root@127.0.0.1 and root@::1 with an empty password (the
		// default "socket" method would refuse TCP logins).
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
		// Must match the server flags: a different redo log size is resized at startup.
		"--innodb-log-file-size=8M",
		"--innodb-buffer-pool-size=32M",
	}
}

// template returns an initialized datadir to copy, creating it on first use. Concurrent creators
// each init their own copy and the first rename wins, so no lock is needed.
func (s *Server) template(ctx context.Context) (string, error) {
	st, err := os.Stat(s.bin)
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%s", s.bin, st.Size(), st.ModTime().UnixNano(), strings.Join(initArgs(), " "))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("outboxd-mariadb-template-%x", h.Sum64()))
	if _, err := os.Stat(filepath.Join(dir, templateMarker)); err == nil {
		if initialized(filepath.Join(dir, "data")) {
			return filepath.Join(dir, "data"), nil
		}
		// Damaged (someone cleaned /tmp partly): replace it.
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "outboxd-mariadb-template-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left here
	if err := s.installDB(ctx, filepath.Join(tmp, "data")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, templateMarker), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Lost the race to another process, or a stale unmarked dir is in the way.
		if _, serr := os.Stat(filepath.Join(dir, templateMarker)); serr != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "data"), nil
}

// initialized reports whether datadir holds the system tables.
func initialized(datadir string) bool {
	st, err := os.Stat(filepath.Join(datadir, "mysql", "user.frm"))
	return err == nil && !st.IsDir()
}

// templateMarker is written last, so a template dir without it is incomplete.
const templateMarker = "complete"

// installDB runs mariadb-install-db into datadir.
func (s *Server) installDB(ctx context.Context, datadir string) error {
	inst, err := installDB(s.bin)
	if err != nil {
		return err
	}
	args := append([]string{"--no-defaults", "--datadir=" + datadir}, initArgs()...)
	cmd := exec.CommandContext(ctx, inst, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	serverproc.SetPdeathsig(cmd)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mariadb: %s %s: %w\n%s", inst, strings.Join(args, " "), err, serverproc.Tail(out.Bytes(), 4000))
	}
	return nil
}

// startLoop starts the server, retrying with a new port when a port it picked itself was taken
// between the probe and the bind.
func (s *Server) startLoop(ctx context.Context, o Options) error {
	pick := o.Port == 0
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := o.Port
		if pick {
			p, err := serverproc.FreePort()
			if err != nil {
				return fmt.Errorf("mariadb: %w", err)
			}
			port = p
		}
		err := s.startOnce(ctx, o, port)
		if err == nil {
			return nil
		}
		lastErr = err
		if !pick || !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return lastErr
}

var errPortInUse = errors.New("port in use")

func (o Options) args(s *Server, port int) []string {
	rowMeta := strings.ToUpper(o.RowMetadata)
	if rowMeta == "" {
		rowMeta = "FULL"
	}
	format := strings.ToUpper(o.BinlogFormat)
	if format == "" {
		format = "ROW"
	}
	a := []string{
		"--no-defaults", // must be first: ignore /etc/mysql/my.cnf
		"--user=root",   // mariadbd refuses to run as root otherwise
		"--datadir=" + s.dataDir(),
		"--socket=" + s.socket(),
		"--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"),
		// Its own temp files beside its data: a shared /tmp that another process cleans
		// under it fails queries with Error 6 on #sql-temptable files.
		"--tmpdir=" + s.Dir,
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--log-bin=" + filepath.Join(s.dataDir(), "mysql-bin"),
		"--server-id=1",
		"--binlog-format=" + format,
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=" + rowMeta,
		"--gtid-strict-mode=1",
		"--log-slave-updates",
		// --no-defaults leaves a latin1 server.
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_unicode_ci",
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=8M",
		// Throwaway data: trade durability for speed.
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--innodb-doublewrite=0",
		"--max-connections=300",
	}
	if s.errLogPath != "" {
		a = append(a, "--log-error="+s.errLogPath)
	}
	return append(a, o.ExtraArgs...)
}

// startOnce starts mariadbd on port and waits for it to accept connections.
func (s *Server) startOnce(ctx context.Context, o Options, port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("mariadb: server already running")
	}
	s.errLogPath = ""
	if o.Log == nil {
		s.errLogPath = filepath.Join(s.Dir, "error.log")
	}
	args := o.args(s, port)
	cmd := exec.Command(s.bin, args...)
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	s.lastStderr = &tailBuffer{max: 16 << 10}
	var stderr io.Writer = s.lastStderr
	if o.Log != nil {
		stderr = io.MultiWriter(o.Log, s.lastStderr)
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	logStart := s.errLogSize()
	p, err := serverproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("mariadb: start %s: %w", s.bin, err)
	}
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeout)
		defer cancel()
	}
	// Another test's server may hold the port a moment after it was free: answering on it is
	// not proof that this one started. Ours has our datadir.
	ours := func(ctx context.Context, db *sql.DB) error {
		var dir string
		if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
			return err
		}
		if filepath.Clean(dir) != filepath.Clean(s.dataDir()) {
			return fmt.Errorf("port %d is answered by another server (datadir %s)", port, dir)
		}
		return nil
	}
	if err := serverproc.WaitOwnSQL(ctx, s.config(""), p, "mariadbd", ours); err != nil {
		p.Kill()
		log := s.logSince(logStart)
		if strings.Contains(log, "Address already in use") || strings.Contains(log, "Do you already have another server running on port") {
			return fmt.Errorf("mariadb: port %d: %w: %w\n%s", port, errPortInUse, err, log)
		}
		return fmt.Errorf("mariadb: start on port %d (datadir %s): %w\nserver log:\n%s", port, s.dataDir(), err, log)
	}
	s.proc = p
	return nil
}

func (s *Server) errLogSize() int64 {
	if s.errLogPath == "" {
		return 0
	}
	st, err := os.Stat(s.errLogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince returns the server log written since offset (the error log file, or captured stderr).
func (s *Server) logSince(offset int64) string {
	var b []byte
	if s.errLogPath != "" {
		f, err := os.Open(s.errLogPath)
		if err == nil {
			defer f.Close()
			if _, err := f.Seek(offset, io.SeekStart); err == nil {
				b, _ = io.ReadAll(f)
			}
		}
	}
	if s.lastStderr != nil {
		b = append(b, s.lastStderr.Bytes()...)
	}
	return serverproc.Tail(b, 4000)
}

// LogTail returns up to the last n bytes of the server's error log, for failure reports.
// Safe for concurrent use.
func (s *Server) LogTail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errLogPath != "" {
		if b, err := os.ReadFile(s.errLogPath); err == nil {
			return serverproc.Tail(b, n)
		}
	}
	if s.lastStderr != nil {
		return serverproc.Tail(s.lastStderr.Bytes(), n)
	}
	return ""
}

func (s *Server) config(db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr
	cfg.DBName = db
	// Both charset and collation: without them MariaDB may fall back to latin1 and
	// double-encode UTF-8.
	_ = mysql.Charset("utf8mb4", "utf8mb4_general_ci")(cfg)
	cfg.ParseTime = true
	return cfg
}

// RootDSN returns a go-sql-driver DSN for root (empty password) over TCP, charset utf8mb4, with
// database db ("" for none). Safe for concurrent use.
func (s *Server) RootDSN(db string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.config(db).FormatDSN()
}

// DB opens a pool as root on database db, creating the database first when db is not "" and it
// does not exist (one binlogged transaction; none when it exists). It
// blocks until the server answered a ping. On error no pool is left open. Safe for concurrent use.
func (s *Server) DB(ctx context.Context, db string) (*sql.DB, error) {
	if db != "" {
		admin, err := s.DB(ctx, "")
		if err != nil {
			return nil, err
		}
		// Check first: CREATE DATABASE IF NOT EXISTS is binlogged (a new GTID) even when the
		// database exists, which would disturb tests that count transactions.
		var n int
		err = admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", db).Scan(&n)
		if err == nil && n == 0 {
			_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+sqlident.Quote(db))
		}
		admin.Close()
		if err != nil {
			return nil, fmt.Errorf("mariadb %s: create database %s: %w", s.Addr, db, err)
		}
	}
	pool, err := sql.Open("mysql", s.RootDSN(db))
	if err != nil {
		return nil, fmt.Errorf("mariadb %s: open: %w", s.Addr, err)
	}
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("mariadb %s: ping: %w", s.Addr, err)
	}
	return pool, nil
}

// Restart stops the server (gracefully; a server already stopped or killed is fine) and starts it
// again on the same datadir and port with options o (o.Dir and o.Port are ignored). It blocks
// like Start. On error the server is stopped.
func (s *Server) Restart(ctx context.Context, o Options) error {
	if err := s.Stop(); err != nil {
		return err
	}
	o.Dir = s.Dir
	o.Port = s.Port
	return s.startOnce(ctx, o, s.Port)
}

// Reinit stops the server (gracefully; a server already stopped or killed is fine), throws its
// datadir away, and starts it with a fresh one (the system tables only, as Start makes it) on
// the same port with options o (o.Dir and o.Port are ignored): a rebuilt server that kept its
// address. It blocks like Start. On error the server is stopped.
func (s *Server) Reinit(ctx context.Context, o Options) error {
	if err := s.Stop(); err != nil {
		return err
	}
	if err := os.RemoveAll(s.dataDir()); err != nil {
		return fmt.Errorf("mariadb %s: remove datadir: %w", s.Addr, err)
	}
	if err := s.initDatadir(ctx); err != nil {
		return err
	}
	o.Dir = s.Dir
	o.Port = s.Port
	return s.startOnce(ctx, o, s.Port)
}

// Stop shuts the server down with SIGTERM and waits for it to exit, sending SIGKILL after 30 s.
// Stopping a stopped server is a no-op. Safe for concurrent use.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	if err := p.Stop(stopTimeout); err != nil {
		return fmt.Errorf("mariadb %s: %w", s.Addr, err)
	}
	return nil
}

// Kill stops the server with SIGKILL (a crash: no clean shutdown, InnoDB recovers on the next
// start) and waits for it to exit. Safe for concurrent use.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	s.proc.Kill()
	s.proc = nil
	return nil
}

// Running reports whether the server process is alive. Safe for concurrent use.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.Running()
}

// Close stops the server and removes its directory when Start created it. It blocks until the
// process exited; the directory is removed even when the stop reported an error.
func (s *Server) Close() error {
	err := s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanupFiles()
	return err
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
