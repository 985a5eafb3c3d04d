package checkpoint

// Storage is where a checkpoint is kept: the file Store or the MySQLStore. Load returns nil, nil
// before the first Save; Save replaces the checkpoint durably (it blocks until the write is
// durable, and on error the previous checkpoint is still what Load returns); Close releases what
// the store holds, after which Load and Save fail. Implementations are safe for concurrent use.
type Storage interface {
	Load() (*Checkpoint, error)
	Save(c Checkpoint) error
	Close() error
}

var (
	_ Storage = (*Store)(nil)
	_ Storage = (*MySQLStore)(nil)
)
