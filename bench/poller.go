package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pollBatch is the reference relay's batch size ("取一批(比如 200 条)").
const pollBatch = 200

// poller is the polling outbox relay of the reference article, implemented as described there:
// a scheduled job claims up to 200 pending rows of mq_outbox with SELECT … FOR UPDATE SKIP
// LOCKED in a transaction and marks them claimed (status=1), sends them, and marks the sent ones
// status=2 after the broker's ack; failed ones go back to status=0 with retry_count+1 and an
// exponential next_retry_at (1s, 5s, 30s, 2min, 10min). A poll that returned a full batch polls
// again at once (drains the backlog); otherwise it sleeps Interval. Without the drain, one batch
// per 1 s tick could never carry 3,000 events/s, which the article reports it did.
type poller struct {
	db       *sql.DB
	cl       *kgo.Client
	topic    string
	interval time.Duration

	stmts atomic.Int64 // statements sent to MariaDB (START TRANSACTION, SELECT, UPDATE, COMMIT)
	polls atomic.Int64
	sent  atomic.Int64
}

// newPoller connects a kgo producer (acks=all, no linger) to brokers. The pool db must
// interpolate statements client side (openGenDB) so each statement is one Questions count.
func newPoller(db *sql.DB, brokers []string, topic string, interval time.Duration) (*poller, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.DefaultProduceTopic(topic),
	)
	if err != nil {
		return nil, fmt.Errorf("poller producer: %w", err)
	}
	return &poller{db: db, cl: cl, topic: topic, interval: interval}, nil
}

// run polls until ctx ends. It blocks; it returns ctx's error or the first failure of the
// database (send failures are retried through next_retry_at, as the reference does).
func (p *poller) run(ctx context.Context) error {
	defer p.cl.Close()
	for {
		n, err := p.once(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if n == pollBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.interval):
		}
	}
}

type pendingRow struct {
	id                   int64
	msgKey, key, payload string
}

// once claims, sends and marks one batch and returns its size.
func (p *poller) once(ctx context.Context) (int, error) {
	p.polls.Add(1)
	rows, err := p.claim(ctx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	recs := make([]*kgo.Record, len(rows))
	for i, r := range rows {
		recs[i] = &kgo.Record{
			Key:     []byte(r.key),
			Value:   []byte(r.payload),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(r.msgKey)}},
		}
	}
	res := p.cl.ProduceSync(ctx, recs...)
	var ok, failed []int64
	for i, pr := range res {
		if pr.Err != nil {
			failed = append(failed, rows[i].id)
		} else {
			ok = append(ok, rows[i].id)
		}
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if len(ok) > 0 {
		p.stmts.Add(1)
		if _, err := p.db.ExecContext(ctx, "UPDATE mq_outbox SET status=2, sent_at=NOW() WHERE id IN ("+idList(ok)+")"); err != nil {
			return 0, fmt.Errorf("poller: mark %d rows sent: %w", len(ok), err)
		}
		p.sent.Add(int64(len(ok)))
	}
	if len(failed) > 0 {
		p.stmts.Add(1)
		if _, err := p.db.ExecContext(ctx, `UPDATE mq_outbox SET status=0, retry_count=retry_count+1,
  next_retry_at = NOW() + INTERVAL ELT(LEAST(retry_count+1, 5), 1, 5, 30, 120, 600) SECOND
  WHERE id IN (`+idList(failed)+")"); err != nil {
			return 0, fmt.Errorf("poller: reschedule %d failed rows: %w", len(failed), err)
		}
	}
	return len(rows), nil
}

// claim selects up to pollBatch due rows and marks them claimed, in one transaction.
func (p *poller) claim(ctx context.Context) ([]pendingRow, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("poller: begin: %w", err)
	}
	p.stmts.Add(1)
	defer tx.Rollback() // no-op after Commit
	p.stmts.Add(1)
	q, err := tx.QueryContext(ctx, `SELECT id, msg_key, biz_key, payload FROM mq_outbox
  WHERE status=0 AND next_retry_at<=NOW() ORDER BY id LIMIT `+strconv.Itoa(pollBatch)+` FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return nil, fmt.Errorf("poller: select pending: %w", err)
	}
	var rows []pendingRow
	for q.Next() {
		var r pendingRow
		if err := q.Scan(&r.id, &r.msgKey, &r.key, &r.payload); err != nil {
			q.Close()
			return nil, fmt.Errorf("poller: scan: %w", err)
		}
		rows = append(rows, r)
	}
	if err := errors.Join(q.Err(), q.Close()); err != nil {
		return nil, fmt.Errorf("poller: select pending: %w", err)
	}
	if len(rows) > 0 {
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.id
		}
		p.stmts.Add(1)
		if _, err := tx.ExecContext(ctx, "UPDATE mq_outbox SET status=1 WHERE id IN ("+idList(ids)+")"); err != nil {
			return nil, fmt.Errorf("poller: claim: %w", err)
		}
	}
	p.stmts.Add(1)
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("poller: commit claim: %w", err)
	}
	return rows, nil
}

func idList(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}
