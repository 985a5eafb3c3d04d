package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// ackSink acknowledges every message, unless block is set: then Send waits for ctx.
type ackSink struct {
	mu    sync.Mutex
	got   []string
	block bool
}

func (s *ackSink) Send(ctx context.Context, msgs []*sink.Message) error {
	if s.block {
		<-ctx.Done()
		return sink.AllFailed(len(msgs), ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.got = append(s.got, m.EventID)
	}
	return nil
}

func (s *ackSink) Close() error { return nil }

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`source: {flavor: mariadb, addr: "127.0.0.1:3306", user: u, server_id: 9}
tables: [{table: shop.outbox_event}]
sinks: {main: {type: kafka, brokers: ["127.0.0.1:9092"]}}
routes: [{sink: main, topic: "{topic}"}]
checkpoint: {path: /tmp/x.json}
retry: {initial: 10ms, max: 20ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func events(from, n int) []binlog.Event {
	var evs []binlog.Event
	for i := from; i < from+n; i++ {
		id := fmt.Sprint(i)
		evs = append(evs, binlog.Event{Schema: "shop", Table: "outbox_event", EventID: binlog.FieldOf([]byte(id)),
			Key: binlog.FieldOf([]byte("k")), Topic: binlog.FieldOf([]byte("t")), Payload: binlog.FieldOf([]byte(id)),
			EventType: binlog.Field{Missing: true}, Headers: binlog.Field{Missing: true}})
	}
	return evs
}

// Every page is delivered in order and deliver returns nil only after all were acknowledged.
func TestDeliverAll(t *testing.T) {
	s := &ackSink{}
	c := Config{Cfg: testConfig(t), Sinks: map[string]sink.Sink{"main": s}}
	snap := Snapshot{Position: gtid.Empty(gtid.MariaDB)}
	err := deliver(t.Context(), c, snap, func(ctx context.Context, send func(*binlog.Txn) error) error {
		for p := range 5 {
			if err := send(&binlog.Txn{Events: events(p*10, 10)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 50 || s.got[0] != "0" || s.got[49] != "49" {
		t.Fatalf("delivered %v", s.got)
	}
}

// A broker that never answers: deliver retries until ctx ends, then fails (nothing is saved).
func TestDeliverInterrupted(t *testing.T) {
	c := Config{Cfg: testConfig(t), Sinks: map[string]sink.Sink{"main": &ackSink{block: true}}}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := deliver(ctx, c, Snapshot{Position: gtid.Empty(gtid.MariaDB)}, func(ctx context.Context, send func(*binlog.Txn) error) error {
		return send(&binlog.Txn{Events: events(0, 3)})
	})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("deliver = %v, want interrupted", err)
	}
}

// A read error fails the backfill with that error.
func TestDeliverReadError(t *testing.T) {
	c := Config{Cfg: testConfig(t), Sinks: map[string]sink.Sink{"main": &ackSink{}}}
	boom := errors.New("boom")
	err := deliver(t.Context(), c, Snapshot{Position: gtid.Empty(gtid.MariaDB)}, func(ctx context.Context, send func(*binlog.Txn) error) error {
		if err := send(&binlog.Txn{Events: events(0, 3)}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("deliver = %v, want boom", err)
	}
}

func TestCompactSetAndWhere(t *testing.T) {
	if got := compactSet("a:1-3,\nb:1-2\n"); got != "a:1-3,b:1-2" {
		t.Fatalf("compactSet = %q", got)
	}
	if where("  ") != "1=1" || where("status = 0") != "(status = 0)" {
		t.Fatal("where")
	}
}

func TestAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"8.4.0": true, "9.1.0-commercial": true, "8.0.39": false, "8.3.0": false, "5.7.44-log": false, "x": false, "10.0.1": true} {
		if atLeast(v, 8, 4) != want {
			t.Errorf("atLeast(%q, 8, 4) != %v", v, want)
		}
	}
}

func TestKeysetAfter(t *testing.T) {
	if got := keysetAfter([]string{"`a`"}); got != "(`a` > ?)" {
		t.Fatalf("one column: %s", got)
	}
	if got := keysetAfter([]string{"a", "b", "c"}); got != "(a > ?) OR (a = ? AND b > ?) OR (a = ? AND b = ? AND c > ?)" {
		t.Fatalf("three columns: %s", got)
	}
	if got := fmt.Sprint(keysetArgs([]any{1, "x", 3})); got != "[1 1 x 1 x 3]" {
		t.Fatalf("args: %s", got)
	}
	if keysetArgs(nil) != nil {
		t.Fatal("args of the first page")
	}
}
