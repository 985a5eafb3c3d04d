package tablelayout

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
)

// A save records the layouts of the DDL transactions its binlog position covers, and only
// those: a checkpoint before an ALTER keeps the layout rows before it are read with.
func TestLayoutLogAt(t *testing.T) {
	old := checkpoint.Layouts{"app.outbox": {{Name: "event_id", Type: "varchar(64)"}, {Name: "biz_key", Type: "varchar(64)"}}}
	l := &Log{}
	l.Reset(old)
	swapped := []binlog.Column{{Name: "biz_key", ColumnType: "varchar(64)"}, {Name: "event_id", ColumnType: "varchar(64)"}}
	l.LayoutChanged(&binlog.Txn{File: "bin.000002", Pos: 500, Layouts: map[binlog.TableRef][]binlog.Column{{Schema: "app", Table: "outbox"}: swapped}})
	l.LayoutChanged(&binlog.Txn{File: "bin.000003", Pos: 100, Layouts: map[binlog.TableRef][]binlog.Column{{Schema: "app", Table: "outbox"}: nil}})

	order := func(c checkpoint.Checkpoint) string {
		var names []string
		for _, c := range l.At(c)["app.outbox"] {
			names = append(names, c.Name)
		}
		return strings.Join(names, ",")
	}
	cp := func(file string, pos uint32) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-9", File: file, Pos: pos}
	}
	for _, c := range []struct {
		cp   checkpoint.Checkpoint
		want string
	}{
		{cp("", 0), "event_id,biz_key"}, // no position yet: nothing of this session covered
		{cp("bin.000002", 499), "event_id,biz_key"},
		{cp("bin.000002", 500), "biz_key,event_id"},
		{cp("bin.000002", 900), "biz_key,event_id"},
		{cp("bin.000003", 100), ""}, // the table could not be read after the second DDL: unknown
	} {
		if got := order(c.cp); got != c.want {
			t.Errorf("at %s:%d: layout %q, want %q", c.cp.File, c.cp.Pos, got, c.want)
		}
	}
	if old["app.outbox"][0].Name != "event_id" {
		t.Error("At modified the layouts it was reset with")
	}
	if !binlogAfter("bin.1000000", 4, "bin.999999", 900) || binlogAfter("bin.000001", 900, "bin.000002", 4) {
		t.Error("binlogAfter orders files by number")
	}
}

func TestLayoutChanges(t *testing.T) {
	a := []checkpoint.LayoutColumn{{Name: "event_id", Type: "varchar(64)"}, {Name: "biz_key", Type: "varchar(64)"}}
	b := []checkpoint.LayoutColumn{{Name: "biz_key", Type: "varchar(64)"}, {Name: "event_id", Type: "varchar(64)"}}
	changed, unrecorded := layoutChanges(checkpoint.Layouts{"app.o1": a, "app.o2": a}, checkpoint.Layouts{"app.o1": a, "app.o2": b, "app.o3": a})
	if len(changed) != 1 || changed[0] != "outbox table app.o2: columns 1 and 2 swapped: was event_id, biz_key; now biz_key, event_id" {
		t.Errorf("changed = %q", changed)
	}
	if len(unrecorded) != 1 || unrecorded[0] != "app.o3" {
		t.Errorf("unrecorded = %q, want the table the checkpoint has no layout for", unrecorded)
	}
	if changed, unrecorded := layoutChanges(nil, checkpoint.Layouts{"app.o1": a}); len(changed) != 0 || len(unrecorded) != 1 {
		t.Errorf("a checkpoint without layouts: changed %q, unrecorded %q; want it unchecked, not changed", changed, unrecorded)
	}
}
