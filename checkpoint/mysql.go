package checkpoint

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/sqlident"
)

// ErrUnreachable is wrapped by MySQLStore errors when the server could not be reached or the
// connection broke: the caller reconnects (as for a lost binlog stream) rather than giving up.
var ErrUnreachable = errors.New("checkpoint store unreachable")

// ErrStoreMisconfigured is wrapped by MySQLStore errors that retrying cannot fix (the table or a
// column is missing, a privilege is denied, the writer is read-only): the message says what to
// change.
var ErrStoreMisconfigured = errors.New("checkpoint store misconfigured")

// ErrSuperseded is wrapped when the row's fencing token (epoch, holder) is not this store's: a
// newer holder owns the checkpoint, so this process must not move it.
var ErrSuperseded = errors.New("checkpoint row belongs to another holder (superseded)")

// MySQLTimeout bounds one Load or Save of the MySQL store.
const MySQLTimeout = 10 * time.Second

// MySQLConfig configures a MySQLStore.
type MySQLConfig struct {
	// DB is a pool to the writable primary; the store closes it on Close.
	DB *sql.DB
	// Table is "schema.table"; Name keys this pipeline's row.
	Table, Name string
	// Addr names the server in messages.
	Addr string
	// Scope is what this process relays: Claim refuses a row written for other tables, and
	// saves without a scope of their own write it.
	Scope *Scope
}

// MySQLStore keeps the checkpoint as one row of a table on the writable primary. Safe for
// concurrent use.
type MySQLStore struct {
	cfg   MySQLConfig
	quote string // `schema`.`table`

	mu     sync.Mutex
	closed bool
	// epoch and holder are the fencing token every Save is conditional on, set by Claim.
	epoch  uint64
	holder string

	// lockMu guards the holder lock: the named lock (HolderLockName) held on a connection of
	// its own while this store is the row's holder, so commands can tell that it runs.
	lockMu   sync.Mutex
	lockConn *sql.Conn
	lockName string
}

// OpenMySQL returns the store over cfg.DB. It does not block and does not check the table (Load,
// Save and `outboxd check` do).
func OpenMySQL(cfg MySQLConfig) (*MySQLStore, error) {
	schema, table, ok := strings.Cut(cfg.Table, ".")
	if !ok || schema == "" || table == "" || cfg.Name == "" || cfg.DB == nil {
		return nil, fmt.Errorf("checkpoint: mysql store needs a pool, a schema.table and a name (got table %q, name %q)", cfg.Table, cfg.Name)
	}
	return &MySQLStore{cfg: cfg, quote: sqlident.Table(schema, table)}, nil
}

// quoteIdent quotes a MySQL identifier. Pure.
// MySQLColumns are the table's columns, in DDL order; `outboxd check` verifies them.
var MySQLColumns = []string{"name", "flavor", "gtid_set", "binlog_file", "binlog_pos", "commit_time", "saved_at", "epoch", "holder", MarkColumn, "layouts", "scope"}

// CreateTableSQL is the DDL of the checkpoint table. Pure.
func CreateTableSQL(table string) string {
	schema, name, _ := strings.Cut(table, ".")
	return "CREATE TABLE " + sqlident.Table(schema, name) + ` (
  name        VARCHAR(64)     NOT NULL PRIMARY KEY,
  flavor      VARCHAR(16)     NOT NULL,
  gtid_set    TEXT            NOT NULL,
  binlog_file VARCHAR(255)    NOT NULL DEFAULT '',
  binlog_pos  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  commit_time DATETIME(6)     NULL,
  saved_at    DATETIME(6)     NOT NULL,
  epoch       BIGINT UNSIGNED NOT NULL DEFAULT 0,
  holder      VARCHAR(128)    NOT NULL DEFAULT '',
  reconciled_through DATETIME(6) NULL,
  layouts     TEXT            NULL,
  scope       TEXT            NULL
) ENGINE=InnoDB`
}

// GrantSQL is the GRANT the store needs on table and nothing more, to account (as CURRENT_USER()
// prints it, such as 'outboxd'@'%'). Pure.
func GrantSQL(table, account string) string {
	schema, name, _ := strings.Cut(table, ".")
	return fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s.%s TO %s", sqlident.Quote(schema), sqlident.Quote(name), account)
}

const timeLayout = "2006-01-02 15:04:05.999999"

// Load reads this name's row; nil, nil when there is none. It blocks on one query (at most
// MySQLTimeout and ctx). A row that is not a valid checkpoint is an error: outboxd must not
// start from a guessed position.
func (s *MySQLStore) Load(ctx context.Context) (*Checkpoint, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	var c Checkpoint
	var flavor string
	var commit sql.NullString
	var saved string
	var layouts, scope sql.NullString
	err := s.cfg.DB.QueryRowContext(ctx, "SELECT flavor, gtid_set, binlog_file, binlog_pos, commit_time, saved_at, layouts, scope FROM "+s.quote+" WHERE name = ?", s.cfg.Name).
		Scan(&flavor, &c.GTIDSet, &c.File, &c.Pos, &commit, &saved, &layouts, &scope)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("load", err)
	}
	if flavor == "" && c.GTIDSet == "" {
		return nil, nil // claimed by a holder that has not saved a position yet
	}
	c.Flavor = gtid.Flavor(flavor)
	if commit.Valid {
		if c.CommitTime, err = time.Parse(timeLayout, commit.String); err != nil {
			return nil, fmt.Errorf("%s: corrupt row: commit_time %q: %w", s.where(), commit.String, err)
		}
	}
	if c.SavedAt, err = time.Parse(timeLayout, saved); err != nil {
		return nil, fmt.Errorf("%s: corrupt row: saved_at %q: %w", s.where(), saved, err)
	}
	if c.Layouts, err = decodeLayouts(layouts); err != nil {
		return nil, fmt.Errorf("%s: corrupt row: %w; write a position with `outboxd checkpoint set`", s.where(), err)
	}
	if c.Scope, err = parseScope(scope); err != nil {
		return nil, fmt.Errorf("%s: corrupt row: %w; write a position with `outboxd checkpoint set`", s.where(), err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: corrupt row: %w; write a position with `outboxd checkpoint set`", s.where(), err)
	}
	return &c, nil
}

// parseScope decodes the scope column (NULL: a row written before outboxd recorded scopes).
func parseScope(col sql.NullString) (*Scope, error) {
	if !col.Valid || col.String == "" {
		return nil, nil
	}
	var sc Scope
	if err := json.Unmarshal([]byte(col.String), &sc); err != nil {
		return nil, fmt.Errorf("scope %q: %w", col.String, err)
	}
	return &sc, nil
}

// scopeColumn encodes sc for the scope column (NULL for nil).
func scopeColumn(sc *Scope) any {
	if sc == nil {
		return nil
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return nil // a struct of strings and a time always encodes
	}
	return string(b)
}

// Save writes c to this name's row, conditional on the store's fencing token. It blocks on at
// most three statements (bounded by MySQLTimeout and ctx). Errors wrap ErrUnreachable
// (reconnect), ErrStoreMisconfigured (fix the server), ErrSuperseded (another holder's row) or
// are transient SQL errors (lock wait, deadlock) worth a retry, which carry their fix (see Fix);
// on error the row holds the previous checkpoint.
func (s *MySQLStore) Save(ctx context.Context, c Checkpoint) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%s: refuse to save: %w", s.where(), err)
	}
	if c.SavedAt.IsZero() {
		c.SavedAt = time.Now().UTC()
	}
	if err := s.open(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	var commit any // NULL when unknown
	if !c.CommitTime.IsZero() {
		commit = c.CommitTime.UTC().Format(timeLayout)
	}
	saved := c.SavedAt.UTC().Format(timeLayout)
	// The row is written on the writable primary, in a transaction of its own (one autocommit
	// statement), so it is replicated in the same binlog as the data it names: a replica that
	// is promoted holds a checkpoint that never names a transaction it lacks, because the row
	// reached it after every transaction the row's gtid_set covers (they were committed on
	// the primary before outboxd read, sent and saved them).
	//
	// The WHERE clause is the fencing: a process whose token (epoch, holder) is no longer the
	// row's, because another process claimed the row since (a new leader, a restart elsewhere,
	// `outboxd checkpoint set`), changes nothing, however late it wakes up.
	epoch, holder := s.token()
	if c.Scope == nil {
		c.Scope = s.cfg.Scope
	}
	res, err := s.cfg.DB.ExecContext(ctx, "UPDATE "+s.quote+
		" SET flavor = ?, gtid_set = ?, binlog_file = ?, binlog_pos = ?, commit_time = ?, saved_at = ?, layouts = ?, scope = COALESCE(?, scope)"+
		" WHERE name = ? AND epoch = ? AND holder = ?",
		string(c.Flavor), c.GTIDSet, c.File, c.Pos, commit, saved, encodeLayouts(c.Layouts), scopeColumn(c.Scope), s.cfg.Name, epoch, holder)
	if err != nil {
		return s.wrap("save", err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		s.KeepHolderLock(ctx)
		return nil
	}
	return s.unchanged(ctx, "save", epoch, holder, &c)
}

// unchanged explains a fenced UPDATE that changed no row: another holder's row, no row at all
// (never claimed, or deleted), or (without CLIENT_FOUND_ROWS) a row that already held exactly
// these values, which is success. c is the checkpoint the UPDATE wrote (nil for a write of
// something else, such as the reconcile mark): a row found gone is replaced by its tombstone.
func (s *MySQLStore) unchanged(ctx context.Context, op string, epoch uint64, holder string, c *Checkpoint) error {
	rowEpoch, rowHolder, found, err := s.readToken(ctx)
	if err != nil {
		return s.wrap(op, err)
	}
	switch {
	case found && rowEpoch == epoch && rowHolder == holder:
		return nil // the row already held these values
	case !found && c == nil:
		return fmt.Errorf("%s: %s: the row is gone (deleted since this process claimed it at epoch %d): %w", s.where(), op, epoch, ErrSuperseded)
	case !found:
		// Never let the next process guess (source.start): keep what this one knows, c, whose
		// transactions the brokers acknowledged, as a tombstone that every later start refuses
		// until an operator writes a position back.
		reason := fmt.Sprintf("the row was deleted while %s held it at epoch %d", holder, epoch)
		if err := s.MarkLost(ctx, *c, holder, reason); err != nil {
			return fmt.Errorf("%s: the row is gone (%s), and the tombstone with the last position %s was not written: %w", s.where(), reason, c.GTIDSet, err)
		}
		return &LostError{Where: s.where(), GTIDSet: c.GTIDSet, Lost: Lost{At: time.Now().UTC(), By: holder, Reason: reason}}
	}
	return fmt.Errorf("%s: the row is held by %q at epoch %d, this process writes as %q at epoch %d: %w",
		s.where(), rowHolder, rowEpoch, holder, epoch, ErrSuperseded)
}

// Claim makes holder the row's only writer: it creates the row (with no position yet, which
// Load reports as no checkpoint) or bumps its epoch and sets holder, and from then on every
// Save is conditional on that token. Any earlier holder's saves fail with ErrSuperseded. With
// leader election the caller holds the lock; without it, the newest process to start wins and
// an older one still running stops at its next save. It blocks on two statements (bounded by
// MySQLTimeout and ctx) and returns the new epoch.
//
// The epoch alone is not a token: an asynchronous failover can lose the last claim, so the
// same epoch can be issued twice; the holder, unique per process, tells the two apart.
func (s *MySQLStore) Claim(ctx context.Context, holder string) (uint64, error) {
	if holder == "" {
		return 0, fmt.Errorf("%s: claim needs a holder id", s.where())
	}
	if err := s.open(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	if err := s.claimRow(ctx, holder); err != nil {
		return 0, err
	}
	epoch, rowHolder, _, err := s.readToken(ctx)
	if err != nil {
		return 0, s.wrap("claim", err)
	}
	if rowHolder != holder {
		return 0, fmt.Errorf("%s: claimed, but %q at epoch %d claimed it right after: %w", s.where(), rowHolder, epoch, ErrSuperseded)
	}
	s.mu.Lock()
	s.epoch, s.holder = epoch, holder
	s.mu.Unlock()
	if err := s.takeHolderLock(ctx, holder); err != nil {
		return 0, err
	}
	return epoch, nil
}

// claimRow bumps the row's epoch to holder, or creates it with this store's scope, in one
// transaction that first refuses a tombstone or a row written for other tables: such a claim
// would supersede the process that relays the row's own tables.
func (s *MySQLStore) claimRow(ctx context.Context, holder string) error {
	tx, err := s.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("claim", err)
	}
	defer tx.Rollback()
	var c Checkpoint
	var scope sql.NullString
	err = tx.QueryRowContext(ctx, "SELECT gtid_set, scope FROM "+s.quote+" WHERE name = ? FOR UPDATE", s.cfg.Name).Scan(&c.GTIDSet, &scope)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s.wrap("claim", err)
	}
	if err == nil {
		if c.Scope, err = parseScope(scope); err != nil {
			return fmt.Errorf("%s: corrupt row: %w; write a position with `outboxd checkpoint set`: %w", s.where(), err, ErrStoreMisconfigured)
		}
		want := c.Scope // a store without a scope of its own (a command) refuses only a tombstone
		if s.cfg.Scope != nil {
			want = s.cfg.Scope
		}
		if want != nil {
			if err := CheckScope(s.where(), &c, want.Tables); err != nil {
				return err
			}
		}
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+s.quote+
		" (name, flavor, gtid_set, saved_at, epoch, holder, scope) VALUES (?, '', '', UTC_TIMESTAMP(6), 1, ?, ?)"+
		" ON DUPLICATE KEY UPDATE epoch = epoch + 1, holder = VALUES(holder)", s.cfg.Name, holder, scopeColumn(s.cfg.Scope))
	if err != nil {
		return s.wrap("claim", err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("claim", err)
	}
	return nil
}

// MarkLost writes c, marked lost by holder for reason, as the row when the row is gone or
// holds no position (only a claim): the tombstone that keeps the next start from guessing. A
// row that holds a position (an operator's, or a tombstone already) is left as it is. It blocks
// on a short transaction (bounded by MySQLTimeout and ctx).
func (s *MySQLStore) MarkLost(ctx context.Context, c Checkpoint, holder, reason string) error {
	if err := s.open(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	if c.Scope == nil {
		c.Scope = s.cfg.Scope
	}
	c = Tombstone(c, holder, reason, time.Now())
	tx, err := s.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("write the tombstone", err)
	}
	defer tx.Rollback()
	var flavor string
	err = tx.QueryRowContext(ctx, "SELECT flavor FROM "+s.quote+" WHERE name = ? FOR UPDATE", s.cfg.Name).Scan(&flavor)
	switch {
	case err == nil && flavor != "":
		return nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return s.wrap("write the tombstone", err)
	}
	var commit any
	if !c.CommitTime.IsZero() {
		commit = c.CommitTime.UTC().Format(timeLayout)
	}
	// holder 'lost' matches no process's token: every save still running on the row fails.
	_, err = tx.ExecContext(ctx, "INSERT INTO "+s.quote+
		" (name, flavor, gtid_set, binlog_file, binlog_pos, commit_time, saved_at, epoch, holder, scope) VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), 1, 'lost', ?)"+
		" ON DUPLICATE KEY UPDATE flavor = VALUES(flavor), gtid_set = VALUES(gtid_set), binlog_file = VALUES(binlog_file),"+
		" binlog_pos = VALUES(binlog_pos), commit_time = VALUES(commit_time), saved_at = VALUES(saved_at), epoch = epoch + 1,"+
		" holder = VALUES(holder), scope = VALUES(scope)",
		s.cfg.Name, string(c.Flavor), c.GTIDSet, c.File, c.Pos, commit, scopeColumn(c.Scope))
	if err != nil {
		return s.wrap("write the tombstone", err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("write the tombstone", err)
	}
	return nil
}

// takeHolderLock holds HolderLockName(holder) on a connection of its own from now until Close
// (or the next claim): the liveness signal of this process as the row's holder. A lock another
// connection holds (this process's own dropped connection the server has not noticed yet) is
// taken again at a later save.
func (s *MySQLStore) takeHolderLock(ctx context.Context, holder string) error {
	name := HolderLockName(s.cfg.Table, s.cfg.Name, holder)
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.lockName != name && s.lockConn != nil {
		s.lockConn.Close() // the server frees the old name with the connection
		s.lockConn = nil
	}
	s.lockName = name
	return s.ensureHolderLock(ctx)
}

// KeepHolderLock re-takes the holder lock after its connection dropped (a writer restart, a
// reset path, a KILL, wait_timeout on a connection that runs no other query); the check
// itself keeps that connection from idling out. Saves call it, and so must a timer while
// the holder is idle (no saves), or commands would run beside it. Failures are left for the
// next call: the lock is a signal for commands, not part of the fencing. It blocks on one or
// two queries (bounded by ctx); a no-op before Claim. Safe for concurrent use.
func (s *MySQLStore) KeepHolderLock(ctx context.Context) {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.lockName != "" {
		_ = s.ensureHolderLock(ctx)
	}
}

// ensureHolderLock checks that lockConn holds lockName, reconnecting and taking it when not.
// The caller holds lockMu.
func (s *MySQLStore) ensureHolderLock(ctx context.Context) error {
	if s.lockConn != nil {
		var mine sql.NullBool
		err := s.lockConn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", s.lockName).Scan(&mine)
		if err == nil && mine.Valid && mine.Bool {
			return nil
		}
		s.lockConn.Close()
		s.lockConn = nil
	}
	conn, err := s.cfg.DB.Conn(ctx)
	if err != nil {
		return s.wrap("take the holder lock", err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", s.lockName).Scan(&got); err != nil {
		conn.Close()
		return s.wrap("take the holder lock "+s.lockName, err)
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil // held by a connection of ours the server has not dropped yet: retried at the next save
	}
	s.lockConn = conn
	return nil
}

// LiveHolder reports the row's holder and, when that process runs (it holds its holder lock),
// the connection id holding it. found is false when there is no row. It blocks on two
// queries (bounded by ctx and MySQLTimeout).
func (s *MySQLStore) LiveHolder(ctx context.Context) (holder string, connID uint64, alive bool, err error) {
	if err := s.open(); err != nil {
		return "", 0, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	_, holder, found, err := s.readToken(ctx)
	if err != nil {
		return "", 0, false, s.wrap("read the row's holder", err)
	}
	if !found || holder == "" {
		return holder, 0, false, nil
	}
	var id sql.NullInt64
	if err := s.cfg.DB.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", HolderLockName(s.cfg.Table, s.cfg.Name, holder)).Scan(&id); err != nil {
		return "", 0, false, s.wrap("read the holder lock", err)
	}
	return holder, uint64(id.Int64), id.Valid, nil
}

// Overwrite writes c as the row's position for an operator (outboxd checkpoint set and
// migrate), whoever holds the row: it bumps the epoch and makes holder the row's holder, so a
// process still running on the row stops at its next save (ErrSuperseded) instead of writing
// over the operator's position. It blocks on one statement (bounded by MySQLTimeout and ctx).
func (s *MySQLStore) Overwrite(ctx context.Context, c Checkpoint, holder string) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%s: refuse to save: %w", s.where(), err)
	}
	if err := s.open(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	var commit any
	if !c.CommitTime.IsZero() {
		commit = c.CommitTime.UTC().Format(timeLayout)
	}
	saved := c.SavedAt
	if saved.IsZero() {
		saved = time.Now()
	}
	if c.Scope == nil {
		c.Scope = s.cfg.Scope
	}
	// The scope is replaced too: an operator's position clears a tombstone and takes on the
	// table list of the config it was written with.
	_, err := s.cfg.DB.ExecContext(ctx, "INSERT INTO "+s.quote+
		" (name, flavor, gtid_set, binlog_file, binlog_pos, commit_time, saved_at, epoch, holder, layouts, scope) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)"+
		" ON DUPLICATE KEY UPDATE flavor = VALUES(flavor), gtid_set = VALUES(gtid_set), binlog_file = VALUES(binlog_file),"+
		" binlog_pos = VALUES(binlog_pos), commit_time = VALUES(commit_time), saved_at = VALUES(saved_at), epoch = epoch + 1, holder = VALUES(holder),"+
		" layouts = VALUES(layouts), scope = VALUES(scope)",
		s.cfg.Name, string(c.Flavor), c.GTIDSet, c.File, c.Pos, commit, saved.UTC().Format(timeLayout), holder, encodeLayouts(c.Layouts), scopeColumn(c.Scope))
	if err != nil {
		return s.wrap("overwrite", err)
	}
	return nil
}

// Token is the row's fencing token as the server has it now: its epoch and holder; found is
// false when there is no row. It blocks on one query (bounded by ctx and MySQLTimeout).
func (s *MySQLStore) Token(ctx context.Context) (epoch uint64, holder string, found bool, err error) {
	if err := s.open(); err != nil {
		return 0, "", false, err
	}
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	epoch, holder, found, err = s.readToken(ctx)
	if err != nil {
		return 0, "", false, s.wrap("read the fencing token", err)
	}
	return epoch, holder, found, nil
}

// OwnToken is the token this store's saves carry (zero before Claim).
func (s *MySQLStore) OwnToken() (epoch uint64, holder string) { return s.token() }

func (s *MySQLStore) token() (uint64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, s.holder
}

func (s *MySQLStore) readToken(ctx context.Context) (epoch uint64, holder string, found bool, err error) {
	err = s.cfg.DB.QueryRowContext(ctx, "SELECT epoch, holder FROM "+s.quote+" WHERE name = ?", s.cfg.Name).Scan(&epoch, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	return epoch, holder, err == nil, err
}

// releaseTimeout bounds Close's release of the holder lock.
const releaseTimeout = time.Second

// Close releases the holder lock and closes the pool. Later Load and Save calls fail. Closing
// twice is a no-op.
func (s *MySQLStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.lockMu.Lock()
	if s.lockConn != nil {
		// Released explicitly, so commands see this process gone once Close returns: the server
		// frees a closed connection's locks only when it notices the close, a moment later
		// (TestMySQLClaimScopeAndHolderLock saw the lock still held in CI). Closing frees it
		// anyway when the server cannot be reached.
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_, _ = s.lockConn.ExecContext(ctx, "DO RELEASE_LOCK(?)", s.lockName)
		cancel()
		s.lockConn.Close()
		s.lockConn = nil
	}
	s.lockMu.Unlock()
	return s.cfg.DB.Close()
}

// Ping reports whether the writer answers, as a Save's error would (ErrUnreachable when it
// does not). It blocks on one round trip, bounded by ctx and MySQLTimeout.
func (s *MySQLStore) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, MySQLTimeout)
	defer cancel()
	if err := s.cfg.DB.PingContext(ctx); err != nil {
		return s.wrap("ping", err)
	}
	return nil
}

func (s *MySQLStore) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: used after Close", s.where())
	}
	return nil
}

func (s *MySQLStore) where() string {
	return fmt.Sprintf("checkpoint %s row name=%q on %s", s.cfg.Table, s.cfg.Name, s.cfg.Addr)
}

// Server error numbers the store branches on.
const (
	erDupEntry          = 1062
	erConCount          = 1040 // too many connections
	erServerShutdown    = 1053
	erLockWaitTimeout   = 1205
	erLockDeadlock      = 1213
	erConnectionKilled  = 1927
	erNoSuchTable       = 1146
	erBadField          = 1054
	erTableAccessDenied = 1142
	erColumnAccess      = 1143
	erDBAccessDenied    = 1044
	erAccessDenied      = 1045
	erBadDB             = 1049
	erReadOnly          = 1290 // --read-only / super_read_only
	erReadOnlyTxn       = 1792
)

// classify decides, in one place, what a failed statement means: a server that is away
// (ErrUnreachable), one that is set up wrong (ErrStoreMisconfigured, with the fix), or a
// transient SQL error (nil: retry). It is not internal/sqlerr's Transient, and cannot share it:
// sqlerr imports this package (ErrUnreachable is transient there), and the store reads more as
// away (every error the server did not answer, and ERROR 1040, too many connections), retries
// a lock wait or deadlock, and takes every other answer for a setup to fix, with its fix.
func classify(err error) error {
	var me *mysqldriver.MySQLError
	if !errors.As(err, &me) {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return ErrUnreachable // a dial, read or write that failed, or the driver's ErrInvalidConn
	}
	switch me.Number {
	case erConCount, erServerShutdown, erConnectionKilled:
		return ErrUnreachable
	case erLockWaitTimeout, erLockDeadlock:
		return nil
	}
	return ErrStoreMisconfigured
}

// lockWaitFix is the mysql store's fix for a statement that keeps waiting for the row's lock.
const lockWaitFix = "end the transaction that holds a lock on the checkpoint row (see information_schema.innodb_trx)"

// wrap adds the store's name, the error's class and, for a misconfigured server, the fix (in the
// text); a lock wait or deadlock, retried, carries its fix for the caller that gives up (Fix).
func (s *MySQLStore) wrap(op string, err error) error {
	class := classify(err)
	switch {
	case class == nil:
		err = fmt.Errorf("%s: %s: %w", s.where(), op, err)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return WithFix(err, lockWaitFix)
	case errors.Is(class, ErrUnreachable):
		return fmt.Errorf("%s: %s: %w: %w", s.where(), op, ErrUnreachable, err)
	}
	var me *mysqldriver.MySQLError
	errors.As(err, &me)
	fix := "run `outboxd check` for the table and grants the store needs"
	switch me.Number {
	case erNoSuchTable, erBadDB, erBadField:
		fix = "create the table: " + oneLine(CreateTableSQL(s.cfg.Table))
		for column := range addedColumns {
			if me.Number == erBadField && strings.Contains(me.Message, "'"+column+"'") {
				fix = "add the column a table created by an older outboxd lacks: " + AddColumnSQL(s.cfg.Table, column)
			}
		}
	case erTableAccessDenied, erColumnAccess, erDBAccessDenied:
		fix = "grant the store's privileges: " + GrantSQL(s.cfg.Table, "<source.user>") + " (your source.user account)"
	case erReadOnly, erReadOnlyTxn:
		fix = "point checkpoint.writer_addr at the writable primary (this server is read-only)"
	}
	return fmt.Errorf("%s: %s: %w: %w; %s", s.where(), op, ErrStoreMisconfigured, err, fix)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
