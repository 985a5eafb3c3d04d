package startpos

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
)

// OriginCheckpoint is Resolve's origin for a start read from the checkpoint.
const OriginCheckpoint = "checkpoint"

// Options are the run command's flags that choose a start.
type Options struct {
	// FromGTID replays from this executed set instead of the checkpoint.
	FromGTID string
	// Force accepts a start set that lacks a source the server has (nothing else).
	Force bool
}

// Resolve picks the executed GTID set to resume from, and says where it came from:
// --from-gtid, the checkpoint, or source.start (latest, earliest or a set) when there is no
// checkpoint. A set that lacks a source the server has would replay that source from its very
// beginning, so it is refused unless force. A start (from any origin but latest) that needs
// binlogs the server has purged is refused with ErrPurged, force or not: going on means
// losing events, which takes an explicit new position from the operator. A tombstone (a lost
// checkpoint) or a checkpoint of other tables is refused whatever the origin, and never
// replaced by source.start. It blocks on srv's queries and the store's Load; on error the Set
// is the zero Set and the error says what to change. Safe for concurrent use if srv and store are.
func Resolve(ctx context.Context, srv Server, cfg *config.Config, store checkpoint.Storage, o Options) (gtid.Set, string, error) {
	flavor := cfg.Source.Flavor
	fromGTID, force := o.FromGTID, o.Force
	serverPos, err := ServerPosition(ctx, srv, flavor)
	if err != nil {
		return gtid.Set{}, "", err
	}
	var start gtid.Set
	var origin string
	switch {
	case fromGTID != "":
		if start, err = gtid.Parse(flavor, fromGTID); err != nil {
			return gtid.Set{}, "", fmt.Errorf("--from-gtid: %w", err)
		}
		origin = "--from-gtid"
		// The set chooses where to read, not which checkpoint to trust: the first save would
		// write over a lost checkpoint's last position or another config's checkpoint (the
		// mysql store's claim refuses both too); `checkpoint set` replaces either on purpose.
		cp, err := store.Load(ctx)
		if err != nil {
			return gtid.Set{}, "", err
		}
		if err := checkpoint.CheckScope(cfg.Checkpoint.Where(), cp, cfg.ScopeTables()); err != nil {
			return gtid.Set{}, "", fmt.Errorf("--from-gtid does not replace this checkpoint: %w", err)
		}
	default:
		cp, err := store.Load(ctx)
		if err != nil {
			return gtid.Set{}, "", err
		}
		// Trusted only by the config it was written for: a tombstone, or a checkpoint of other
		// tables, stops here, at every start and every takeover.
		if err := checkpoint.CheckScope(cfg.Checkpoint.Where(), cp, cfg.ScopeTables()); err != nil {
			return gtid.Set{}, "", err
		}
		if cp != nil {
			if cp.Flavor != flavor {
				return gtid.Set{}, "", fmt.Errorf("checkpoint %s is for flavor %s but source.flavor is %s: point checkpoint.path (or checkpoint.name) elsewhere or fix source.flavor",
					cfg.Checkpoint.Where(), cp.Flavor, flavor)
			}
			if start, err = cp.Set(); err != nil {
				return gtid.Set{}, "", fmt.Errorf("checkpoint %s: %w", cfg.Checkpoint.Where(), err)
			}
			// Missing sources were checked when the set was first chosen; purges happen since,
			// and a server restored from a backup or reset is behind its replicas' checkpoints.
			if err := checkAhead(ctx, srv, start, serverPos, OriginCheckpoint); err != nil {
				return gtid.Set{}, "", err
			}
			if err := CheckPurged(ctx, srv, flavor, start, OriginCheckpoint, cfg.Checkpoint.Where()); err != nil {
				return gtid.Set{}, "", err
			}
			return start, OriginCheckpoint, nil
		}
		switch s := strings.TrimSpace(cfg.Source.Start); s {
		case "", "latest":
			return serverPos, "source.start: latest", nil
		case "earliest":
			// The oldest binlog's start: an empty set would ask for the first transaction ever,
			// which the server refuses with ERROR 1236 once anything was purged.
			purged, err := srv.Purged(ctx, flavor)
			if err != nil {
				return gtid.Set{}, "", fmt.Errorf("source.start: earliest: find the oldest binlog's position: %w", err)
			}
			if purged.IsEmpty() {
				return gtid.Empty(flavor), "source.start: earliest", nil
			}
			return purged, "source.start: earliest (the oldest binlog)", nil
		default:
			if start, err = gtid.Parse(flavor, s); err != nil {
				return gtid.Set{}, "", fmt.Errorf("source.start: %w", err)
			}
			origin = "source.start"
		}
	}
	if err := validate(ctx, srv, cfg, start, serverPos, origin, force); err != nil {
		return gtid.Set{}, "", err
	}
	return start, origin, nil
}
