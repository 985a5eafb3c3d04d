package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrScopeMismatch is wrapped when a checkpoint was written for other outbox tables than the
// caller's config relays: resuming from it would skip the rows of tables it never covered.
var ErrScopeMismatch = errors.New("checkpoint written for other outbox tables")

// ErrCheckpointLost is wrapped when a checkpoint that existed was found gone and its last
// known position was kept as a tombstone: only an operator's `outboxd checkpoint set` clears it.
var ErrCheckpointLost = errors.New("checkpoint lost")

// Scope is what a checkpoint stands for: the outbox tables (schema.table, sorted) whose
// transactions up to its position were delivered, and the source it was read from (for
// diagnostics only: a failover changes it legitimately). Lost is set on a tombstone.
type Scope struct {
	Tables []string `json:"tables"`
	Source string   `json:"source,omitempty"`
	Lost   *Lost    `json:"lost,omitempty"`
}

// Lost records that a checkpoint vanished (a row deleted, a file removed) while a process that
// knew its position ran; the checkpoint's position is that last known one.
type Lost struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
}

// NewScope returns the scope of source and tables, which it sorts and deduplicates. Pure.
func NewScope(source string, tables []string) *Scope {
	t := slices.Clone(tables)
	slices.Sort(t)
	return &Scope{Tables: slices.Compact(t), Source: source}
}

// Diff reports the tables of want that s does not cover (added) and the tables s covers that
// want lacks (removed), each sorted. Pure.
func (s *Scope) Diff(want []string) (added, removed []string) {
	w := NewScope("", want).Tables
	for _, t := range w {
		if !slices.Contains(s.Tables, t) {
			added = append(added, t)
		}
	}
	for _, t := range s.Tables {
		if !slices.Contains(w, t) {
			removed = append(removed, t)
		}
	}
	return added, removed
}

// ScopeError says that a checkpoint covers other tables than the config. It wraps
// ErrScopeMismatch and ErrStoreMisconfigured (no retry fixes it).
type ScopeError struct {
	Where          string
	Have           []string
	Added, Removed []string
}

func (e *ScopeError) Error() string {
	var diff []string
	if len(e.Added) > 0 {
		diff = append(diff, "tables added: "+strings.Join(e.Added, ", "))
	}
	if len(e.Removed) > 0 {
		diff = append(diff, "tables removed: "+strings.Join(e.Removed, ", "))
	}
	return fmt.Sprintf("checkpoint %s was written for the outbox tables [%s], and this config relays other tables (%s): "+
		"resuming from it would skip the rows of tables it never covered. If this config is not meant to share that checkpoint, "+
		"give it its own checkpoint.name (or checkpoint.path). If the table list changed on purpose, stop every outboxd on the "+
		"checkpoint and choose the position for the new list: `outboxd checkpoint set --config F --from-checkpoint` keeps the "+
		"position (rows of an added table committed before it are not relayed: send them with `outboxd backfill`), or "+
		"`outboxd checkpoint set --config F --gtid SET` starts there",
		e.Where, strings.Join(e.Have, ", "), strings.Join(diff, "; "))
}

func (e *ScopeError) Unwrap() []error { return []error{ErrScopeMismatch, ErrStoreMisconfigured} }

// LostError says that the checkpoint is a tombstone. It wraps ErrCheckpointLost and
// ErrStoreMisconfigured (no retry fixes it).
type LostError struct {
	Where   string
	GTIDSet string
	Lost    Lost
}

func (e *LostError) Error() string {
	return fmt.Sprintf("checkpoint %s was lost (%s; noticed by %s at %s) and is not replaced by a guess: its last known position is %s. "+
		"Find out what removed it, then stop every outboxd on it and write the position back: "+
		"`outboxd checkpoint set --config F --gtid '%s'` (or --from-checkpoint)",
		e.Where, e.Lost.Reason, e.Lost.By, e.Lost.At.UTC().Format(time.RFC3339), e.GTIDSet, e.GTIDSet)
}

func (e *LostError) Unwrap() []error { return []error{ErrCheckpointLost, ErrStoreMisconfigured} }

// CheckScope returns the error that keeps a process relaying tables from trusting c: a
// *LostError for a tombstone, a *ScopeError when c covers other tables. A nil checkpoint, or
// one without a scope (written before outboxd recorded scopes; adopted by the next save), is
// trusted. Pure.
func CheckScope(where string, c *Checkpoint, tables []string) error {
	if c == nil || c.Scope == nil {
		return nil
	}
	if l := c.Scope.Lost; l != nil {
		return &LostError{Where: where, GTIDSet: c.GTIDSet, Lost: *l}
	}
	added, removed := c.Scope.Diff(tables)
	if len(added) == 0 && len(removed) == 0 {
		return nil
	}
	return &ScopeError{Where: where, Have: c.Scope.Tables, Added: added, Removed: removed}
}

// Tombstone returns c marked lost: by names the process, reason what it saw. Pure.
func Tombstone(c Checkpoint, by, reason string, now time.Time) Checkpoint {
	s := Scope{}
	if c.Scope != nil {
		s = *c.Scope
	}
	s.Lost = &Lost{At: now.UTC(), By: by, Reason: reason}
	c.Scope = &s
	return c
}

// HolderLockName is the MySQL named lock a process holds while it is the holder of the
// checkpoint row name in table: its liveness signal, which `outboxd backfill`, `checkpoint set`
// and `migrate` look for with IS_USED_LOCK. It is hashed to stay within GET_LOCK's 64
// characters whatever the table, name and holder. Pure.
func HolderLockName(table, name, holder string) string {
	sum := sha256.Sum256([]byte(table + "\x00" + name + "\x00" + holder))
	return "outboxd.holder." + hex.EncodeToString(sum[:20])
}
