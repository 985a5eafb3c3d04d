// Package kafkaread reads Kafka topics back as a read_committed consumer does, with two
// independent clients: franz-go (kgo with FetchIsolationLevel(ReadCommitted())) and kcat
// (librdkafka, -X isolation.level=read_committed). An exactly-once test that counts duplicates
// and losses with both does not rest on one client's reading of the transaction markers and
// aborted-transaction lists.
package kafkaread

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// EventIDHeader is the header outboxd puts each row's event id in.
const EventIDHeader = "event_id"

// Record is one record as a read_committed consumer saw it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil for a null key
	Value     []byte
	EventID   string // the event_id header ("" when the record has none)
}

// Reader is a read_committed franz-go consumer of some topics from their first offset. It is
// safe for concurrent use.
type Reader struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []Record
}

// NewReader creates a Reader of topics on brokers. It does not block: the first Poll connects.
func NewReader(brokers []string, topics ...string) (*Reader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, fmt.Errorf("read_committed consumer: %w", err)
	}
	return &Reader{cl: cl}, nil
}

// EventID is kr's event id header (EventIDHeader; "" without one). Pure.
func EventID(kr *kgo.Record) string {
	id := ""
	for _, h := range kr.Headers {
		if h.Key == EventIDHeader {
			id = string(h.Value)
		}
	}
	return id
}

// Poll fetches once, waiting at most until ctx ends, and adds what arrived to Records.
func (r *Reader) Poll(ctx context.Context) {
	f := r.cl.PollFetches(ctx)
	var got []Record
	f.EachRecord(func(kr *kgo.Record) {
		got = append(got, Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, EventID: EventID(kr)})
	})
	r.mu.Lock()
	r.recs = append(r.recs, got...)
	r.mu.Unlock()
}

// PollUntil polls until done (given everything read so far) reports true, or ctx ends. It
// returns the records read either way, and ctx's error when done never held.
func (r *Reader) PollUntil(ctx context.Context, done func([]Record) bool) ([]Record, error) {
	for {
		recs := r.Records()
		if done(recs) {
			return recs, nil
		}
		if ctx.Err() != nil {
			return recs, ctx.Err()
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		r.Poll(pctx)
		cancel()
	}
}

// Records is a copy of every record read so far, in arrival order (per partition in offset
// order).
func (r *Reader) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

// Close closes the client.
func (r *Reader) Close() { r.cl.Close() }

// errNoKcat says how to get kcat.
var errNoKcat = errors.New("kcat not found: apt-get install -y kcat (scripts/install-deps.sh installs it)")

// KcatPath returns kcat's path, or an error saying how to install it.
func KcatPath() (string, error) {
	p, err := exec.LookPath("kcat")
	if err != nil {
		return "", errNoKcat
	}
	return p, nil
}

// kcatFormat prints, per record, a header line "partition TAB offset TAB key length TAB value
// length TAB headers" and then the key and value bytes (lengths -1 for null) and a newline:
// the lengths let binary keys and values, newlines included, come back unmangled.
const kcatFormat = "%p\t%o\t%K\t%S\t%h\n%k%s\n"

// Kcat reads topic on broker from its first offset to its last stable offset with kcat as a
// read_committed consumer (-X isolation.level=read_committed, -e: exit at the end) and returns
// its records in (partition, offset) order as kcat printed them. It blocks until kcat exits or
// ctx ends. Headers other than event_id are not kept.
func Kcat(ctx context.Context, broker, topic string) ([]Record, error) {
	bin, err := KcatPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-C", "-b", broker, "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", kcatFormat)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kcat -C -b %s -t %s: %w: %s", broker, topic, err, strings.TrimSpace(stderr.String()))
	}
	recs, err := parseKcat(topic, &stdout)
	if err != nil {
		return nil, fmt.Errorf("kcat -C -b %s -t %s: %w", broker, topic, err)
	}
	return recs, nil
}

// parseKcat reads kcatFormat's output.
func parseKcat(topic string, out io.Reader) ([]Record, error) {
	br := bufio.NewReader(out)
	var recs []Record
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("record %d: truncated header line %q", len(recs), line)
		}
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 5)
		if len(f) != 5 {
			return nil, fmt.Errorf("record %d: header line %q has %d fields, want 5", len(recs), line, len(f))
		}
		var nums [4]int64
		for i := range nums {
			if nums[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				return nil, fmt.Errorf("record %d: header line %q: %w", len(recs), line, err)
			}
		}
		rec := Record{Topic: topic, Partition: int32(nums[0]), Offset: nums[1]}
		if rec.Key, err = readN(br, nums[2]); err != nil {
			return nil, fmt.Errorf("record %d: key: %w", len(recs), err)
		}
		if rec.Value, err = readN(br, nums[3]); err != nil {
			return nil, fmt.Errorf("record %d: value: %w", len(recs), err)
		}
		if b, err := br.ReadByte(); err != nil || b != '\n' {
			return nil, fmt.Errorf("record %d: no newline after the value", len(recs))
		}
		for _, h := range strings.Split(f[4], ",") {
			if k, v, ok := strings.Cut(h, "="); ok && k == EventIDHeader {
				rec.EventID = v
			}
		}
		recs = append(recs, rec)
	}
}

// readN reads n bytes (nil for n < 0, a null).
func readN(br *bufio.Reader, n int64) ([]byte, error) {
	if n < 0 {
		return nil, nil
	}
	b := make([]byte, n)
	_, err := io.ReadFull(br, b)
	return b, err
}

// Tally is what a read_committed consumer saw of a set of committed event ids.
type Tally struct {
	Records    int      // records read (by position: a re-read position counts once)
	Duplicates int      // records beyond the first of an event id
	Lost       []string // committed ids never read, in commit order
	Unexpected []string // ids read that were not committed (or had no event_id header)
}

// Count compares recs with committed (event ids in commit order). Records at the same
// (topic, partition, offset) count once, so a consumer that re-read a position after a
// reconnect is not taken for a resend.
func Count(recs []Record, committed []string) Tally {
	want := make(map[string]bool, len(committed))
	for _, id := range committed {
		want[id] = true
	}
	type pos struct {
		topic string
		part  int32
		off   int64
	}
	seenPos := map[pos]bool{}
	seen := map[string]bool{}
	var t Tally
	for _, r := range recs {
		p := pos{r.Topic, r.Partition, r.Offset}
		if seenPos[p] {
			continue
		}
		seenPos[p] = true
		t.Records++
		if seen[r.EventID] {
			t.Duplicates++
			continue
		}
		seen[r.EventID] = true
		if !want[r.EventID] {
			t.Unexpected = append(t.Unexpected, r.EventID)
		}
	}
	for _, id := range committed {
		if !seen[id] {
			t.Lost = append(t.Lost, id)
		}
	}
	return t
}
