package router

import (
	"sync"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
)

// patterns are the tables[].pattern entries with, per table name seen, the entry that takes it
// (nil: a listed table or none), decided once so a row costs one map lookup.
type patterns struct {
	list    []*tablePattern
	decided sync.Map // tableKey → *tablePattern
}

// tablePattern is one pattern entry: its tables' columns and message shape.
type tablePattern struct {
	pat   config.TablePattern
	cols  config.Columns
	shape *tableShape // nil without shape options
}

// addPattern adds tables[i], a pattern entry; one whose pattern does not parse (config.Validate
// refuses it) matches nothing.
func (r *Router) addPattern(i int, t config.Table) {
	p, err := config.ParseTablePattern(t.Pattern)
	if err != nil {
		return
	}
	if r.patterns == nil {
		r.patterns = &patterns{}
	}
	r.patterns.list = append(r.patterns.list, &tablePattern{pat: p, cols: t.Columns, shape: newShape(i, t)})
}

// patternOf returns the pattern entry that relays ev's table, nil for a listed table or when
// none matches (the first matching entry wins, as config.TableFor decides). Safe for
// concurrent use.
func (r *Router) patternOf(ev *binlog.Event) *tablePattern {
	if r.patterns == nil {
		return nil
	}
	k := tableKey{ev.Schema, ev.Table}
	if v, ok := r.patterns.decided.Load(k); ok {
		return v.(*tablePattern)
	}
	var found *tablePattern
	if _, listed := r.tables[ev.Schema+"."+ev.Table]; !listed {
		for _, p := range r.patterns.list {
			if p.pat.Match(ev.Schema, ev.Table) {
				found = p
				break
			}
		}
	}
	r.patterns.decided.Store(k, found)
	return found
}
