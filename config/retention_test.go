package config

import (
	"strings"
	"testing"
	"time"
)

func TestMinBinlogRetention(t *testing.T) {
	c, err := parse([]byte(minimal), noEnv)
	if err != nil || c.Source.MinBinlogRetention != DefaultMinBinlogRetention || DefaultMinBinlogRetention != 24*time.Hour {
		t.Fatalf("default: %v, %v", c.Source.MinBinlogRetention, err)
	}
	y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  min_binlog_retention: 168h", 1)
	if c, err := parse([]byte(y), noEnv); err != nil || c.Source.MinBinlogRetention != 168*time.Hour {
		t.Errorf("168h: %v, %v", c, err)
	}
	for _, v := range []string{"-1h", "500ms"} {
		y := strings.Replace(minimal, "server_id: 4242", "server_id: 4242\n  min_binlog_retention: "+v, 1)
		wantContains(t, mustFail(t, y, noEnv), "source.min_binlog_retention (line 7): must be at least 1s", "skip_checks", "got "+v)
	}
}
