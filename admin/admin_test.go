package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady atomic.Value
	notReady.Store([]string{"source 127.0.0.1:3306: binlog stream not connected"})
	srv, err := Listen(Config{
		Listen:   "127.0.0.1:0",
		Gatherer: reg,
		Status: func(context.Context) Status {
			return Status{Version: "v1", Flavor: "mariadb", CheckpointGTIDSet: "0-1-5", AckedGTIDSet: "0-1-7",
				CheckpointSaveError: "checkpoint not saved: disk full", CheckpointFailingSince: time.Unix(1700000000, 0).UTC(), Sinks: map[string]Sink{"main": {Type: "kafka", Known: true, Up: true}},
				OldestUnacked: &OldestEvent{Table: "shop.outbox_event", ID: "42", EventID: "e-1", Topic: "order.created", Sink: "main",
					GTID: "0-1-6", ReadAt: time.Unix(1700000000, 0).UTC(), AgeSeconds: 62},
				HA: HA{Enabled: true, Role: "leader", LockName: "outboxd.orders", Holder: "web-1-42-a1b2c3", Epoch: 3, Since: time.Unix(1700000000, 0).UTC(), Reason: "lock granted"}}
		},
		Ready: func(context.Context) []string { return notReady.Load().([]string) },
		Role:  func() string { return "standby" },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "outboxd_test_total 3") {
		t.Fatalf("/metrics %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	code, body := get("/readyz")
	var r Readiness
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != 503 || r.Ready || len(r.NotReady) != 1 || !strings.Contains(r.NotReady[0], "not connected") {
		t.Fatalf("/readyz %d %s %v", code, body, err)
	}
	notReady.Store([]string(nil))
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, `"ready": true`) || !strings.Contains(body, `"role": "standby"`) {
		t.Fatalf("/readyz %d %s", code, body)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer fcancel()
	st, err := FetchStatus(fctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v1" || st.CheckpointGTIDSet != "0-1-5" || st.AckedGTIDSet != "0-1-7" || st.CheckpointSaveError == "" || !st.Sinks["main"].Up ||
		st.OldestUnacked == nil || st.OldestUnacked.EventID != "e-1" || st.OldestUnacked.ID != "42" {
		t.Fatalf("status = %+v", st)
	}
	var b strings.Builder
	if err := st.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"outboxd v1", "role         leader since 2023-11-14T22:13:20Z (lock outboxd.orders, holder web-1-42-a1b2c3, epoch 3)", "acked        0-1-7", "checkpoint   0-1-5", "NOT SAVING since 2023-11-14T22:13:20Z (reading paused): checkpoint not saved: disk full", "sink main", "kafka up",
		`oldest       event_id "e-1" (shop.outbox_event id 42, gtid 0-1-6) for main topic order.created, read 1m2s ago`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed status lacks %q:\n%s", want, b.String())
		}
	}
}

func TestListenConflictNamesTheSetting(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := Config{Listen: "127.0.0.1:0", Gatherer: reg, Status: func(context.Context) Status { return Status{} },
		Ready: func(context.Context) []string { return nil }}
	a, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.ln.Close()
	cfg.Listen = a.Addr()
	if _, err := Listen(cfg); err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Fatalf("err = %v", err)
	}
}

// The printed status says what /readyz says: the not-ready reasons first, and a sink that
// answers while a topic of it is missing as not ready, never as up.
func TestPrintNotReady(t *testing.T) {
	st := Status{
		Version:  "v1",
		NotReady: []string{"source db1:3306: binlog stream not connected", "sink main: topic order.paid does not exist: messages wait"},
		Sinks: map[string]Sink{
			"main": {Type: "kafka", Known: true, Up: true, NotReady: []string{"sink main: topic order.paid does not exist: messages wait"}},
			"rmq":  {Type: "rocketmq", Known: true, Up: true},
			"new":  {Type: "kafka", NotReady: []string{"sink new: not probed yet"}},
		},
	}
	var b strings.Builder
	if err := st.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NOT READY    source db1:3306: binlog stream not connected\n             sink main: topic order.paid does not exist",
		"sink main    kafka NOT READY: topic order.paid does not exist: messages wait\n",
		"sink rmq     rocketmq up\n",
		"sink new     kafka unknown (nothing sent or probed yet)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "kafka up") {
		t.Errorf("a sink /readyz calls not ready is printed up:\n%s", b.String())
	}
	st = Status{Version: "v1", Ready: true}
	b.Reset()
	_ = st.Print(&b)
	if !strings.Contains(b.String(), "ready        yes\n") {
		t.Errorf("ready status:\n%s", b.String())
	}
}
