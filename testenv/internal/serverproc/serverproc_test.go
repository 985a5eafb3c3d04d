package serverproc

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

func TestStopFallsBackToKill(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let sh install the trap
	err = p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") || p.Running() {
		t.Fatalf("Stop of a process ignoring SIGTERM: %v (running %v), want killed", err, p.Running())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop of an exited process: %v", err)
	}
}

func TestWaitSQLReturnsWhenTheProcessExits(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "tcp", "127.0.0.1:"+strconv.Itoa(port), "root"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = WaitSQL(ctx, cfg, p, "fake")
	if err == nil || !strings.Contains(err.Error(), "fake exited before accepting connections") {
		t.Fatalf("WaitSQL: %v, want the exit reported", err)
	}
}
