package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkatap"
)

// The HA harness: several outboxd processes (the built binary) with the same config except
// admin.listen, the Kafka client_id (so the broker-side tap can attribute their produces) and
// the source address, which for each is its own fault proxy in front of the one shared MariaDB
// (so one instance's path can be blackholed). All share one kfake broker behind a kafkatap.

// haOpts shape an HA world.
type haOpts struct {
	Instances    int
	Lease        time.Duration // ha.lease (default 2s)
	KafkaTimeout time.Duration // the sink's timeout, S in the contract (default 2s)
	Interval     string        // checkpoint.interval (default 200ms)
	// ExactlyOnce runs delivery: exactly_once with the Kafka checkpoint store (useKafkaStore)
	// instead of the mysql store; the leader lock stays on the source. haWorld.row then has
	// no table to read.
	ExactlyOnce bool
}

// haInstance is one outboxd of the world.
type haInstance struct {
	name     string
	clientID string
	admin    string
	myPx     *faultproxy.Proxy
	cfgPath  string
	p        *proc // the current process; nil before start
}

type haWorld struct {
	t      *testing.T
	w      *world
	kc     *kfake.Cluster
	tap    *kafkatap.Tap
	opts   haOpts
	table  string // the checkpoint table
	ckName string // checkpoint.name
	lock   string // the lock name (the default: from checkpoint.name and the tables)
	inst   []*haInstance
}

// newHAWorld builds the world on the shared MariaDB; nothing runs until start.
func newHAWorld(t *testing.T, o haOpts) *haWorld {
	t.Helper()
	if o.Lease == 0 {
		o.Lease = 2 * time.Second
	}
	if o.KafkaTimeout == 0 {
		o.KafkaTimeout = 2 * time.Second
	}
	if o.Interval == "" {
		o.Interval = "200ms"
	}
	w := newWorld(t, sharedServer(t))
	return newHAWorldOn(t, w, o)
}

func newHAWorldOn(t *testing.T, w *world, o haOpts) *haWorld {
	t.Helper()
	kc, tap, err := kafkatap.Start(kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kc.Close(); tap.Close() })
	h := &haWorld{t: t, w: w, kc: kc, tap: tap, opts: o, ckName: "ha-" + w.schema}
	base := simpleCfg(t, w, kc, w.position())
	h.lock = lockNameOf(base, h.ckName)
	if o.ExactlyOnce {
		useKafkaStore(t, kc, &base, h.ckName)
	} else {
		h.table = useMySQLStore(w, &base, h.ckName)
	}
	base.Interval = o.Interval
	base.ServerID = 1000 + int(serverIDs.Add(1)) // one server_id for all: the same config
	for i := 0; i < o.Instances; i++ {
		in := &haInstance{name: string(rune('a' + i)), admin: admFreeAddr(t), myPx: proxyTo(t, w.srv.Addr)}
		in.clientID = "outboxd-" + in.name
		c := base
		c.Dir = t.TempDir()
		c.Addr = in.myPx.Addr()
		c.Sinks = map[string]string{"main": fmt.Sprintf("{type: kafka, brokers: [%q], timeout: %s, client_id: %s}",
			tap.Addr(), o.KafkaTimeout, in.clientID)}
		c.Extra = base.Extra + fmt.Sprintf("ha: {enabled: true, lease: %s}\nadmin: {listen: %q}\n", o.Lease, in.admin)
		in.cfgPath = writeCfg(t, c)
		h.inst = append(h.inst, in)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, in := range h.inst {
			if in.p != nil {
				t.Logf("--- outboxd %s (%s) output:\n%s", in.name, in.clientID, tail(in.p.output(), 80))
			}
		}
	})
	return h
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// haBound is the contract's takeover bound after a network cut: W + 1 s, W = ceil(lease + S + 2 s).
func (h *haWorld) haBound() (w, bound time.Duration) {
	w = time.Duration(math.Ceil((h.opts.Lease + h.opts.KafkaTimeout + 2*time.Second).Seconds())) * time.Second
	return w, w + time.Second
}

// start runs instance i's binary (again, if it ran before).
func (h *haWorld) start(i int) *haInstance {
	h.t.Helper()
	in := h.inst[i]
	in.p = startBinary(h.t, "run", "--config", in.cfgPath)
	return in
}

// haStatus is /status's ha object.
type haStatus struct {
	Enabled  bool      `json:"enabled"`
	Role     string    `json:"role"`
	LockName string    `json:"lock_name"`
	Holder   string    `json:"holder"`
	Epoch    int64     `json:"epoch"`
	Since    time.Time `json:"since"`
}

// statusDoc is the part of /status the HA tests read.
type statusDoc struct {
	HA                *haStatus `json:"ha"`
	CheckpointGTIDSet string    `json:"checkpoint_gtid_set"`
}

// status reads in's /status; ok is false while it does not answer (starting, stopped, exited).
func (in *haInstance) status() (statusDoc, bool) {
	code, body := admGet(in.admin, "/status")
	var s statusDoc
	if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || s.HA == nil {
		return statusDoc{}, false
	}
	return s, true
}

// role is in's ha.role ("" while /status does not answer).
func (in *haInstance) role() string {
	s, ok := in.status()
	if !ok {
		return ""
	}
	return s.HA.Role
}

// waitRole polls in's /status every 20 ms until its role is role and returns the status and
// when the poll saw it.
func (h *haWorld) waitRole(in *haInstance, role string, timeout time.Duration) (haStatus, time.Time) {
	h.t.Helper()
	return haWaitRole(h.t, in, role, timeout)
}

func haWaitRole(t *testing.T, in *haInstance, role string, timeout time.Duration) (haStatus, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last statusDoc
	for {
		s, ok := in.status()
		if ok {
			last = s
			if s.HA.Role == role {
				return *s.HA, time.Now()
			}
		}
		if in.p != nil && !in.p.running() {
			t.Fatalf("outboxd %s exited (%v) while waiting for role %s:\n%s", in.name, in.p.err, role, tail(in.p.output(), 60))
		}
		if time.Now().After(deadline) {
			t.Fatalf("outboxd %s: role %q within %s, want %q (last ha status %+v)", in.name, roleOf(last), timeout, role, last.HA)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func roleOf(s statusDoc) string {
	if s.HA == nil {
		return ""
	}
	return s.HA.Role
}

// metric scrapes one unlabelled metric of in (false when /metrics does not answer or lacks it).
func (in *haInstance) metric(name string) (float64, bool) {
	code, body := admGet(in.admin, "/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return 0, false
	}
	return metricValue(fams, name, nil)
}

// signal sends sig to in's process (SIGSTOP freezes it, SIGCONT wakes it, SIGKILL is kill -9).
func (in *haInstance) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := in.p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("outboxd %s: send %s: %v", in.name, sig, err)
	}
}

// roleChange is one "role changed" log line.
type roleChange struct {
	At       time.Time
	Role     string
	Epoch    int64
	Holder   string
	LockName string
	Reason   string
}

// roleChanges parses in's output for the "role changed" lines.
func (in *haInstance) roleChanges() []roleChange {
	var out []roleChange
	sc := bufio.NewScanner(strings.NewReader(in.p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Time     string `json:"time"`
			Msg      string `json:"message"`
			Role     string `json:"role"`
			Epoch    int64  `json:"epoch"`
			Holder   string `json:"holder"`
			LockName string `json:"lock_name"`
			Reason   string `json:"reason"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "role changed" {
			continue
		}
		at, _ := time.Parse("2006-01-02T15:04:05.000Z07:00", l.Time)
		out = append(out, roleChange{At: at, Role: l.Role, Epoch: l.Epoch, Holder: l.Holder, LockName: l.LockName, Reason: l.Reason})
	}
	return out
}

// lastRoleChange is in's last "role changed" line to role (ok false: none).
func (in *haInstance) lastRoleChange(role string) (roleChange, bool) {
	rcs := in.roleChanges()
	for i := len(rcs) - 1; i >= 0; i-- {
		if rcs[i].Role == role {
			return rcs[i], true
		}
	}
	return roleChange{}, false
}

// becameLeader is the earliest evidence of when in took the lock for the term in st: its log
// line (millisecond time, written just after) or /status ha.since, whichever is earlier.
func (in *haInstance) becameLeader(st haStatus, seen time.Time) time.Time {
	at := seen
	if !st.Since.IsZero() && st.Since.Before(at) {
		at = st.Since
	}
	for _, rc := range in.roleChanges() {
		if rc.Role == "leader" && rc.Epoch == st.Epoch && !rc.At.IsZero() && rc.At.Before(at) {
			at = rc.At
		}
	}
	return at
}

// lockHolderConn is the server's connection id holding the lock (0: free).
func (h *haWorld) lockHolderConn() int64 {
	h.t.Helper()
	var id sql.NullInt64
	if err := h.w.db.QueryRow("SELECT IS_USED_LOCK(?)", h.lock).Scan(&id); err != nil {
		h.t.Fatal(err)
	}
	return id.Int64
}

// killLockConn KILLs the lock's holder connection from the server side and returns its id.
func (h *haWorld) killLockConn() int64 {
	h.t.Helper()
	id := h.lockHolderConn()
	if id == 0 {
		h.t.Fatalf("lock %s is not held", h.lock)
	}
	var info sql.NullString
	_ = h.w.db.QueryRow("SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&info)
	h.t.Logf("killing lock connection %d (processlist info %q)", id, info.String)
	h.w.exec(fmt.Sprintf("KILL CONNECTION %d", id))
	return id
}

// ckRow is the checkpoint row.
type ckRow struct {
	GTIDSet, SavedAt, Holder string
	Epoch                    int64
}

func (h *haWorld) row() ckRow {
	h.t.Helper()
	var r ckRow
	err := h.w.db.QueryRow("SELECT gtid_set, saved_at, epoch, holder FROM "+h.table+" WHERE name = ?", h.ckName).
		Scan(&r.GTIDSet, &r.SavedAt, &r.Epoch, &r.Holder)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		h.t.Fatal(err)
	}
	return r
}

// flow commits one outbox row per transaction from one goroutine (so the commit order is the
// order of ids) on keys k0..k4 until halt.
type flow struct {
	mu   sync.Mutex
	ids  []string
	gtid map[string]string
	// at is when the transaction began: MariaDB sends a transaction to binlog readers before
	// its COMMIT returns, so a row whose COMMIT returned after a moment may have been read
	// before it; one begun after it cannot have been.
	at     map[string]time.Time
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *haWorld) startFlow(prefix string, every time.Duration) *flow {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flow{gtid: map[string]string{}, at: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("%s%05d", prefix, i)
			// Not bound to ctx: a commit the halt cut short could be committed and unrecorded.
			began := time.Now()
			g, err := commitOne(context.Background(), h.w, row{EventID: id, Key: fmt.Sprintf("k%d", i%5), Topic: "t", Payload: []byte(id)})
			if err != nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
			f.mu.Lock()
			f.ids = append(f.ids, id)
			f.gtid[id], f.at[id] = g, began
			f.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	h.t.Cleanup(func() { cancel(); <-f.done })
	return f
}

// commitOne commits rows in one transaction without failing the test (it runs off the test
// goroutine) and returns the GTID.
func commitOne(ctx context.Context, w *world, rows ...row) (string, error) {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	if err := insertRows(tx, w.schema, "outbox_event", rows); err != nil {
		_ = tx.Rollback()
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", err
	}
	var g string
	err = conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&g)
	return g, err
}

// count is how many rows were committed so far.
func (f *flow) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids)
}

// halt stops the flow and returns the committed ids in commit order.
func (f *flow) halt(t *testing.T) []string {
	t.Helper()
	f.cancel()
	<-f.done
	if f.err != nil {
		t.Fatalf("flow: %v", f.err)
	}
	return append([]string(nil), f.ids...)
}

// checkRuns fails unless, per topic and key, the deliveries in offset order restart (go back
// to an earlier commit) at most runs-1 times: each run of senders delivers in commit order,
// and only a takeover may resend from an earlier point.
func checkRuns(t *testing.T, rs []*kgo.Record, committed []string, runs int) {
	t.Helper()
	pos := map[string]int{}
	for i, id := range committed {
		pos[id] = i
	}
	last := map[string]int{}
	restarts := map[string]int{}
	for _, r := range rs {
		k := r.Topic + "/" + string(r.Key)
		p, ok := pos[header(r, "event_id")]
		if !ok {
			continue
		}
		if l, seen := last[k]; seen && p <= l {
			restarts[k]++
			if restarts[k] > runs-1 {
				t.Fatalf("key %s: deliveries go back %d times (event %s, commit #%d after #%d) with %d runs",
					k, restarts[k], header(r, "event_id"), p, l, runs)
			}
		}
		last[k] = p
	}
}

// logTap writes the tap's Produce record per client to the test log (for a failing run).
func (h *haWorld) logTap() {
	per := map[string]int{}
	var lastAt = map[string]time.Time{}
	for _, r := range h.tap.Requests() {
		if r.APIKey == kafkatap.Produce {
			per[r.ClientID]++
			lastAt[r.ClientID] = r.Forwarded
		}
	}
	for c, n := range per {
		h.t.Logf("tap: %s sent %d produce requests, the last forwarded at %s", c, n, lastAt[c].Format("15:04:05.000"))
	}
}
