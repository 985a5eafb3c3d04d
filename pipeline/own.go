package pipeline

// markOwn marks e as outboxd's own checkpoint save read back (binlog.Txn.OnlyCheckpoint): with
// the mysql store every save is a binlog transaction, and counting it as progress would make
// an idle server write the checkpoint every interval forever. Its position still folds into
// the acknowledged set, and the final save at stop writes it. Call before finish.
func (t *tracker) markOwn(e *entry) {
	t.mu.Lock()
	e.own = true
	t.mu.Unlock()
}
