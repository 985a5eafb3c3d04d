package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/startpos"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// purgeAllButNewest rotates the binlog and purges every older file. MariaDB may keep the
// previous file right after a flush (crash recovery still needs it), so it retries until SHOW
// BINARY LOGS lists one file.
func (w *world) purgeAllButNewest() {
	w.t.Helper()
	w.exec("FLUSH BINARY LOGS")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var files []string
		rows, err := w.db.Query("SHOW BINARY LOGS")
		if err != nil {
			w.t.Fatal(err)
		}
		for rows.Next() {
			var name string
			var size any
			if err := rows.Scan(&name, &size); err != nil {
				w.t.Fatal(err)
			}
			files = append(files, name)
		}
		rows.Close()
		if len(files) == 1 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("PURGE BINARY LOGS kept %v", files)
		}
		w.exec("PURGE BINARY LOGS TO '" + files[len(files)-1] + "'")
		time.Sleep(100 * time.Millisecond)
	}
}

// waitExit waits for an in-process relay to stop on its own and returns its error.
func (r *relay) waitExit(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(d):
		t.Fatalf("outboxd still runs after %s; logs:\n%s", d, r.logText())
		return nil
	}
}

// A start position whose binlogs were purged is refused with the missing GTIDs named, from
// --from-gtid (with or without --force) and from the checkpoint; start: latest and earliest
// work.
func TestPurgedStartIsRefused(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{}) // its own server: purging would break other tests
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	var gs []string
	for i := range 6 {
		gs = append(gs, w.commit(row{EventID: fmt.Sprintf("old%d", i), Key: "k", Topic: "t", Payload: []byte("x")}))
	}
	last := w.position() // the oldest binlog will start after this
	from := gs[2]
	o := simpleCfg(t, w, kc, "")
	cfgPath := writeCfg(t, o)
	// A checkpoint saved before the purge, as when outboxd was down while binlogs expired.
	if code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", from); code != 0 {
		t.Fatalf("checkpoint set exited %d:\n%s", code, out)
	}
	w.purgeAllButNewest()
	after := w.commit(row{EventID: "new0", Key: "k", Topic: "t", Payload: []byte("y")})

	wantLine := fmt.Sprintf("domain 0: 0-1-%d … %s are purged; the oldest binlog starts after %s", gtidSeq(t, from)+1, last, last)
	checkRefusal := func(t *testing.T, err error, origin string) {
		t.Helper()
		if !errors.Is(err, startpos.ErrPurged) {
			t.Fatalf("err = %v, want startpos.ErrPurged", err)
		}
		for _, want := range []string{origin, wantLine, "--from-gtid '" + last + "'", "source.start: latest", "data loss"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	}

	t.Run("from-gtid", func(t *testing.T) {
		r := startRelay(t, o, daemon.Options{FromGTID: from})
		checkRefusal(t, r.waitExit(t, 30*time.Second), "--from-gtid "+from)
	})
	t.Run("force does not bypass", func(t *testing.T) {
		r := startRelay(t, o, daemon.Options{FromGTID: from, Force: true})
		checkRefusal(t, r.waitExit(t, 30*time.Second), "--from-gtid "+from)
	})
	t.Run("checkpoint, as the binary", func(t *testing.T) {
		code, out := runBinary(t, "run", "--config", cfgPath)
		if code != 1 || !strings.Contains(out, wantLine) || !strings.Contains(out, "checkpoint") {
			t.Fatalf("run exited %d, want 1 naming %q:\n%s", code, wantLine, out)
		}
		// checkpoint set checks a new position the same way.
		code, out = runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", gs[0])
		if code == 0 || !strings.Contains(out, "are purged") {
			t.Fatalf("checkpoint set to a purged position exited %d:\n%s", code, out)
		}
	})
	t.Run("source.start set", func(t *testing.T) {
		o2 := simpleCfg(t, w, kc, from)
		r := startRelay(t, o2, daemon.Options{})
		checkRefusal(t, r.waitExit(t, 30*time.Second), "source.start "+from)
	})

	c := newConsumer(t, kc, "t")
	t.Run("earliest starts at the oldest binlog", func(t *testing.T) {
		o3 := simpleCfg(t, w, kc, "earliest")
		r := startRelay(t, o3, daemon.Options{})
		c.waitForEvent("new0", 20*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if got := readCheckpoint(t, o3.Dir); got != after {
			t.Fatalf("checkpoint %q, want %q", got, after)
		}
	})
	t.Run("latest after deleting the checkpoint", func(t *testing.T) {
		if err := os.Remove(filepath.Join(o.Dir, "checkpoint.json")); err != nil {
			t.Fatal(err)
		}
		o.Start = "latest"
		r := startRelay(t, o, daemon.Options{})
		time.Sleep(500 * time.Millisecond) // let it read the server's position first
		w.commit(row{EventID: "new1", Key: "k", Topic: "t", Payload: []byte("z")})
		c.waitForEvent("new1", 20*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
	for _, r := range c.got {
		if strings.HasPrefix(string(r.Value), "old") || strings.HasPrefix(header(r, "event_id"), "old") {
			t.Errorf("a purged-era event was delivered: %s", header(r, "event_id"))
		}
	}
}

// Two outboxd with one server_id cut each other's streams off (MariaDB sends the older one
// ERROR 4052); one of them stops and names the server_id. A kill -9 and restart with the same
// server_id is not mistaken for that.
func TestDuplicateServerIDStops(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	pos := w.position()
	a := simpleCfg(t, w, kc, pos)
	a.ServerID = 4711
	b := simpleCfg(t, w, kc, pos)
	b.ServerID = 4711
	ra := startRelay(t, a, daemon.Options{})
	time.Sleep(time.Second)
	rb := startRelay(t, b, daemon.Options{})

	var err error
	var survivor *relay
	select {
	case err = <-ra.done:
		close(ra.done)
		survivor = rb
	case err = <-rb.done:
		close(rb.done)
		survivor = ra
	case <-time.After(90 * time.Second):
		t.Fatalf("neither outboxd stopped within 90s; logs A:\n%s\nlogs B:\n%s", ra.logText(), rb.logText())
	}
	if err == nil || !strings.Contains(err.Error(), "server_id 4711 is used by another replica") {
		t.Fatalf("err = %v, want the duplicate server_id error", err)
	}
	t.Logf("stopped with: %v", err)
	// The other one goes on streaming.
	c := newConsumer(t, kc, "t")
	w.commit(row{EventID: "dup0", Key: "k", Topic: "t", Payload: []byte("x")})
	c.waitForEvent("dup0", 30*time.Second)
	if err := survivor.stop(t); err != nil {
		t.Fatalf("the survivor failed: %v", err)
	}

	// kill -9, then restart at once with the same server_id: the server still holds the dead
	// process's dump thread and kills it for the new connection.
	cfgPath := writeCfg(t, a)
	p := startBinary(t, "run", "--config", cfgPath)
	w.commit(row{EventID: "dup1", Key: "k", Topic: "t", Payload: []byte("x")})
	c.waitForEvent("dup1", 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	p2 := startBinary(t, "run", "--config", cfgPath)
	for i := 2; i < 5; i++ {
		w.commit(row{EventID: fmt.Sprintf("dup%d", i), Key: "k", Topic: "t", Payload: []byte("x")})
	}
	c.waitForEvent("dup4", 30*time.Second)
	time.Sleep(3 * time.Second) // room for any spurious drop to show
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 30*time.Second); code != 0 || strings.Contains(p2.output(), "another replica") {
		t.Fatalf("restarted outboxd exited %d:\n%s", code, p2.output())
	}
}

// After a failover or a server_id change, every later binlog's Gtid_list names one GTID per
// server of a domain ("[0-2-9,0-1-10]"). Once the older binlogs are purged, outboxd reads the
// oldest one's list to check its start: it must still start from its checkpoint, and from
// start: earliest, and deliver what follows.
func TestStartAfterServerIDChange(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{}) // its own server: it purges
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	c := newConsumer(t, kc, "t")
	r := startRelay(t, o, daemon.Options{})
	conn, err := w.db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET SESSION server_id = 2",
		"INSERT INTO " + w.schema + ".outbox_event (event_id, biz_key, topic, payload) VALUES ('srv2', 'k', 't', 'x')"} {
		if _, err := conn.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	g := w.commit(row{EventID: "srv1", Key: "k", Topic: "t", Payload: []byte("y")})
	c.waitForEvent("srv1", 20*time.Second)
	waitCheckpoint(t, o.Dir, g, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	w.purgeAllButNewest()
	var list string
	rows, err := w.db.Query("SHOW BINLOG EVENTS LIMIT 3")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var log, typ, info string
		var pos, sid, end any
		if err := rows.Scan(&log, &pos, &typ, &sid, &end, &info); err != nil {
			t.Fatal(err)
		}
		if typ == "Gtid_list" {
			list = info
		}
	}
	rows.Close()
	if !strings.Contains(list, "0-2-") || !strings.Contains(list, "0-1-") {
		t.Fatalf("the oldest binlog's Gtid_list is %q, want both servers of domain 0", list)
	}

	after := w.commit(row{EventID: "after", Key: "k", Topic: "t", Payload: []byte("z")})
	t.Run("from the checkpoint", func(t *testing.T) {
		r := startRelay(t, o, daemon.Options{})
		c.waitForEvent("after", 20*time.Second)
		waitCheckpoint(t, o.Dir, after, 10*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("earliest", func(t *testing.T) {
		o2 := simpleCfg(t, w, kc, "earliest")
		r := startRelay(t, o2, daemon.Options{})
		waitCheckpoint(t, o2.Dir, after, 20*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
}
