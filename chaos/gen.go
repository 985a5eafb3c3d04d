package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// Row states as the generator knows them.
const (
	stCommitted  = "committed"   // COMMIT returned nil
	stRolledBack = "rolled_back" // we rolled it back on purpose
	stUnknown    = "unknown"     // an error before or during COMMIT: the table decides
)

// payload is what each outbox row carries; the verifier reads key and seq back from it.
type payload struct {
	Key string `json:"k"`
	Seq int    `json:"s"`
	Tx  string `json:"tx"`
}

type genRow struct {
	Key   string
	Seq   int
	State string
}

// generator commits outbox rows from several connections. Each key belongs to one connection,
// which commits sequentially, so per-key commit order is sequence order.
type generator struct {
	db *sql.DB // written only with gate held
	// gate is read-held by each transaction; a switchover holds it to stop the writes.
	gate    sync.RWMutex
	rate    float64
	workers int
	keysPer int
	seed    int64

	// darkEvery, when above 0, commits a dark row (sql_log_bin=0, lifecycle.go) before about
	// one transaction in darkEvery.
	darkEvery int

	mu       sync.Mutex
	darkRows int64              // dark rows written; their ids are negative, never the auto-increment's
	rows     map[string]*genRow // event_id -> row
	txns     map[string]int     // by outcome
	lastErr  string
}

// topicOf routes even keys to Kafka and odd keys to RocketMQ.
func topicOf(keyIdx int) string {
	if keyIdx%2 == 0 {
		return "kafka.ev"
	}
	return "rmq.ev"
}

// run blocks until ctx ends.
func (g *generator) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := 0; w < g.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			g.worker(ctx, w, rand.New(rand.NewSource(g.seed+int64(w)*7919)))
		}(w)
	}
	wg.Wait()
}

func (g *generator) worker(ctx context.Context, w int, rng *rand.Rand) {
	seq := make([]int, g.keysPer)
	perSec := g.rate / float64(g.workers)
	for tx := 0; ctx.Err() == nil; tx++ {
		if g.darkEvery > 0 && rng.Intn(g.darkEvery) == 0 {
			g.dark(fmt.Sprintf("%sw%d-t%d", darkPrefix, w, tx))
		}
		n := 1 + rng.Intn(20)
		rollback := rng.Intn(10) == 0
		txID := fmt.Sprintf("w%d-t%d", w, tx)
		type item struct {
			id      string
			key     string
			keyIdx  int
			seq     int
			payload []byte
		}
		items := make([]item, n)
		g.mu.Lock()
		for i := range items {
			j := rng.Intn(g.keysPer)
			keyIdx := w*g.keysPer + j
			seq[j]++
			it := item{id: fmt.Sprintf("%s-%d", txID, i), key: fmt.Sprintf("key%02d", keyIdx), keyIdx: keyIdx, seq: seq[j]}
			it.payload, _ = json.Marshal(payload{Key: it.key, Seq: it.seq, Tx: txID})
			items[i] = it
			g.rows[it.id] = &genRow{Key: it.key, Seq: it.seq, State: stUnknown}
		}
		g.mu.Unlock()

		began := time.Now()
		g.gate.RLock()
		db := g.db
		state, err := func() (string, error) {
			tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t, err := db.BeginTx(tctx, nil)
			if err != nil {
				return stUnknown, err
			}
			for _, it := range items {
				if _, err := t.ExecContext(tctx, "INSERT INTO "+schema+".outbox_event (event_id, biz_key, topic, event_type, payload) VALUES (?, ?, ?, ?, ?)",
					it.id, it.key, topicOf(it.keyIdx), "Chaos", it.payload); err != nil {
					_ = t.Rollback()
					return stUnknown, err
				}
			}
			if rollback {
				if err := t.Rollback(); err != nil {
					return stUnknown, err
				}
				return stRolledBack, nil
			}
			if err := t.Commit(); err != nil {
				return stUnknown, err
			}
			return stCommitted, nil
		}()
		g.gate.RUnlock()
		g.mu.Lock()
		for _, it := range items {
			g.rows[it.id].State = state
		}
		g.txns[state]++
		if err != nil {
			g.lastErr = err.Error()
		}
		g.mu.Unlock()
		if err != nil {
			// The server is probably restarting: back off a little.
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if wait := time.Duration(float64(n)/perSec*float64(time.Second)) - time.Since(began); wait > 0 {
			sleepCtx(ctx, wait)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dark commits one row with sql_log_bin=0: in the table, never in the binlog. Its primary key is
// negative so that a switchover's new primary never assigns it (the row stays on the server it
// was written to).
func (g *generator) dark(id string) {
	g.mu.Lock()
	g.darkRows++
	pk := -g.darkRows
	g.rows[id] = &genRow{Key: "dark", State: stUnknown}
	g.mu.Unlock()
	g.gate.RLock()
	tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := g.db.ExecContext(tctx, "SET STATEMENT sql_log_bin=0 FOR INSERT INTO "+schema+
		".outbox_event (id, event_id, biz_key, topic, event_type, payload) VALUES (?, ?, 'dark', 'kafka.ev', 'Dark', '{}')", pk, id)
	cancel()
	g.gate.RUnlock()
	g.mu.Lock()
	if err == nil {
		g.rows[id].State = stCommitted
	}
	g.mu.Unlock()
}
