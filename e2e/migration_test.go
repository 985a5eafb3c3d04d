package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// guideBlock is one fenced block of docs/migrate/polling.md.
type guideBlock struct {
	lang, text string
	rollback   bool // under "## Rolling back"
}

// readGuide returns the fenced blocks of docs/migrate/polling.md in order.
func readGuide(t *testing.T) []guideBlock {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "docs", "migrate", "polling.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []guideBlock
	var cur *guideBlock
	rollback := false
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			rollback = strings.HasPrefix(line, "## Rolling back")
		case cur == nil && strings.HasPrefix(trimmed, "```") && len(trimmed) > 3:
			cur = &guideBlock{lang: trimmed[3:], rollback: rollback}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, "  ") + "\n"
		}
	}
	return out
}

// splitArgs splits a shell command line on spaces, keeping "double-quoted" words whole, and
// drops a trailing # comment.
func splitArgs(line string) []string {
	var args []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == '#' && !quoted && !in:
			return args
		case r == ' ' && !quoted:
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		args = append(args, cur.String())
	}
	return args
}

// The migration guide, step by step as written: the poller's table from the guide, in the state
// a stopped poller leaves it (PENDING, SENDING, SENT and FAILED rows), the guide's tables:
// block in the config, then every `outboxd` command of the guide's sh blocks before "Rolling
// back", in order (run in the background), and its SQL, while the application keeps inserting
// PENDING rows throughout. Every PENDING and SENDING row and every row inserted later reaches
// the RocketMQ broker, each once (no fault here; the guide's "may arrive twice" is about rows
// the old poller had sent), in per-key order; SENT and FAILED rows never.
func TestMigrationGuide(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	blocks := readGuide(t)
	local := func(s string) string { return strings.ReplaceAll(s, "shop.", w.schema+".") }

	// The poller's table: the guide's first sql block.
	if blocks[0].lang != "sql" || !strings.Contains(blocks[0].text, "CREATE TABLE shop.mq_outbox") {
		t.Fatalf("the guide's first block is not the poller's table: %+v", blocks[0])
	}
	w.exec(local(blocks[0].text))
	// Step 1's state: the poller stopped with these rows (keys k0..k9, ids in commit order).
	keyOf := map[string]string{}
	var want []string // PENDING and SENDING, in id order
	status := []int{}
	for i := range 600 {
		st := 2 // SENT
		switch {
		case i >= 300 && i < 590:
			st = 0 // PENDING
		case i >= 590:
			st = 1 // SENDING: claimed, outcome unknown
		case i%50 == 7:
			st = 3 // FAILED
		}
		status = append(status, st)
	}
	for i, st := range status {
		id := fmt.Sprintf("m%d", i)
		keyOf[id] = fmt.Sprintf("k%d", i%10)
		w.exec("INSERT INTO "+w.schema+".mq_outbox (msg_key, biz_key, topic, payload, status) VALUES (?, ?, 'ORDER_EVENT', ?, ?)", id, keyOf[id], id, st)
		if st == 0 || st == 1 {
			want = append(want, id)
		}
	}
	app := startWriterSQL(w, "app-", 10, "INSERT INTO "+w.schema+".mq_outbox (msg_key, biz_key, topic, payload) VALUES (?, ?, 'ORDER_EVENT', ?)")

	rc := rmqCluster(t, rocketmq.Options{Topics: []string{"ORDER_EVENT"}})
	o := cfgOpts{Srv: w.srv, Dir: t.TempDir(), Sinks: map[string]string{"rmq": rmqSink(rc)}, Routes: "  - sink: rmq\n    topic: \"{topic}\"\n"}
	var tablesYAML string
	for _, b := range blocks {
		if b.lang == "yaml" && strings.HasPrefix(b.text, "tables:") {
			tablesYAML = local(b.text)
		}
	}
	if tablesYAML == "" {
		t.Fatal("the guide has no tables: block")
	}
	cfgPath := filepath.Join(o.Dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(o.yaml(), "tables:\n", tablesYAML, 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	var relay *proc
	commands := 0
	for _, b := range blocks[1:] {
		if b.rollback {
			continue
		}
		switch b.lang {
		case "sql":
			rows, err := w.db.Query(local(b.text))
			if err != nil {
				t.Fatalf("the guide's SQL %q: %v", b.text, err)
			}
			rows.Close()
		case "sh":
			for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
				args := splitArgs(local(line))
				if len(args) == 0 || args[0] != "outboxd" {
					continue
				}
				for i := range args {
					if args[i] == "outboxd.yaml" {
						args[i] = cfgPath
					}
				}
				commands++
				if args[1] == "run" {
					relay = startBinary(t, args[1:]...)
					continue
				}
				code, out := runBinary(t, args[1:]...)
				if code != 0 {
					t.Fatalf("%s: exit %d\n%s", line, code, out)
				}
				if strings.Contains(line, "--dry-run") && !strings.Contains(out, "rows match") {
					t.Fatalf("%s printed no count:\n%s", line, out)
				}
			}
		}
	}
	if commands != 4 || relay == nil {
		t.Fatalf("ran %d commands of the guide (want check, backfill --dry-run, backfill, run)", commands)
	}
	// The application goes on after the cut-over.
	n := app.count()
	for app.count() < n+200 {
		time.Sleep(5 * time.Millisecond)
	}
	appIDs, _ := app.halt(t)
	for i, id := range appIDs {
		keyOf[id] = fmt.Sprintf("k%d", i%10)
	}
	committed := append(append([]string{}, want...), appIDs...)
	ms := waitRMQ(t, rc, "ORDER_EVENT", len(committed), 60*time.Second)
	time.Sleep(500 * time.Millisecond)
	ms = rc.Messages("ORDER_EVENT")
	if len(ms) != len(committed) {
		t.Fatalf("%d messages, want %d (each row once)\n%s", len(ms), len(committed), relay.output())
	}
	checkRMQKeyOrder(t, ms, committed, keyOf)
}
