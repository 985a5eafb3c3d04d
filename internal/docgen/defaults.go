package main

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
)

// configDefaults finds every key's default by running config's own ApplyDefaults over
// scenarios in which every optional section is present and empty (once per checkpoint store,
// one sink of each type): a key that was empty before and is set after has a default. A default
// that changes when another key is set (reconcile.window follows reconcile.interval) is marked
// derived instead of printed. Resolved values that ApplyDefaults leaves to accessors
// (admin.listen's Addr, the cleanup block's CleanupFor) are read from those.
func configDefaults() (defaults map[string]string, derived map[string]bool, err error) {
	defaults = map[string]string{}
	for _, store := range []string{config.CheckpointStoreFile, config.CheckpointStoreMySQL, config.CheckpointStoreKafka} {
		c := scenario(store, nil)
		before := leafValues(c)
		c.ApplyDefaults()
		for p, v := range leafValues(c) {
			if v == "" || before[p] != "" {
				continue
			}
			if old, ok := defaults[p]; ok && old != v {
				return nil, nil, fmt.Errorf("%s has two defaults, %s and %s: say in its doc comment when each applies, and teach internal/docgen", p, old, v)
			}
			defaults[p] = v
		}
		for p, v := range resolvedDefaults(c) {
			defaults[p] = v
		}
	}
	derived = map[string]bool{}
	for p, want := range defaults {
		// Set every other key that has a default to something else; a default that moves
		// with them is computed from them.
		c := scenario(store(p), func(q string, v reflect.Value) {
			if q != p && defaults[q] != "" && v.IsZero() {
				perturb(v)
			}
		})
		c.ApplyDefaults()
		if got, ok := leafValues(c)[p]; ok && got != want {
			derived[p] = true
			delete(defaults, p)
		}
	}
	return defaults, derived, nil
}

// store is the checkpoint store under which the key at path p has its default.
func store(p string) string {
	if strings.HasPrefix(p, "transactions.") {
		return config.CheckpointStoreKafka
	}
	if strings.HasPrefix(p, "checkpoint.") && p != "checkpoint.path" && p != "checkpoint.interval" {
		return config.CheckpointStoreMySQL
	}
	return config.CheckpointStoreFile
}

// scenario is a configuration with every optional section present and empty: pointers to
// structs allocated, one item in each list, a Kafka and a RocketMQ sink, ha enabled, and with
// the kafka store delivery: exactly_once (whose transactions section has defaults only then).
// set, when not nil, is called on every leaf first.
func scenario(checkpointStore string, set func(path string, v reflect.Value)) *config.Config {
	c := &config.Config{
		Sinks: map[string]config.Sink{
			config.SinkKafka:    {Type: config.SinkKafka},
			config.SinkRocketMQ: {Type: config.SinkRocketMQ},
		},
		HA:         config.HA{Enabled: true},
		Checkpoint: config.Checkpoint{Store: checkpointStore},
	}
	if checkpointStore == config.CheckpointStoreKafka {
		c.Delivery = config.DeliveryExactlyOnce
	}
	eachLeaf(reflect.ValueOf(c).Elem(), "", true, func(path string, v reflect.Value) {
		if set != nil {
			set(path, v)
		}
	})
	return c
}

// resolvedDefaults are the defaults ApplyDefaults leaves to accessors.
func resolvedDefaults(c *config.Config) map[string]string {
	out := map[string]string{}
	if c.Admin.Listen == nil {
		out["admin.listen"] = c.Admin.Addr()
	}
	if s, ok := c.CleanupFor(0); ok {
		// CleanupSettings' fields carry the names of the cleanup block's.
		block := reflect.TypeFor[config.Cleanup]()
		sv := reflect.ValueOf(s)
		for i := range sv.NumField() {
			f, ok := block.FieldByName(sv.Type().Field(i).Name)
			if !ok {
				continue
			}
			name, _ := config.FieldKey(f)
			if v := leafText(sv.Field(i)); v != "" {
				out["cleanup."+name] = v
				out["tables[].cleanup."+name] = v
			}
		}
	}
	return out
}

// leafValues returns each leaf's value as text ("" when zero) by path.
func leafValues(c *config.Config) map[string]string {
	out := map[string]string{}
	eachLeaf(reflect.ValueOf(c).Elem(), "", false, func(path string, v reflect.Value) {
		if t := leafText(v); t != "" {
			out[path] = t
		}
	})
	return out
}

func leafText(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.IsZero() {
		return ""
	}
	if v.Type() == durationType {
		return formatDuration(time.Duration(v.Int()))
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return "" // lists and maps have no default value to print
}

// perturb sets v, a zero leaf, to a value no default has.
func perturb(v reflect.Value) {
	switch {
	case v.Type() == durationType:
		v.SetInt(int64(7*time.Hour + 7*time.Second))
	case v.Kind() == reflect.String:
		v.SetString("perturbed")
	case v.Kind() == reflect.Int:
		v.SetInt(7777)
	}
}

// eachLeaf calls fn with the path and the settable value of every leaf under v, an addressable
// struct. With alloc it first allocates nil pointers to structs and gives each empty list of
// structs one item, so the sections they hold are walked too.
func eachLeaf(v reflect.Value, path string, alloc bool, fn func(path string, v reflect.Value)) {
	if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem() != durationType {
		if v.IsNil() {
			if !alloc {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	switch {
	case v.Kind() == reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name, ok := config.FieldKey(t.Field(i))
			if !ok {
				continue
			}
			eachLeaf(v.Field(i), joinPath(path, name), alloc, fn)
		}
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		if v.Len() == 0 && alloc {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := range v.Len() {
			eachLeaf(v.Index(i), path+"[]", alloc, fn)
		}
	case v.Kind() == reflect.Map && v.Type().Elem().Kind() == reflect.Struct:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			// Map values are not addressable: walk a copy and put it back.
			item := reflect.New(v.Type().Elem()).Elem()
			item.Set(v.MapIndex(k))
			eachLeaf(item, path+".<name>", alloc, fn)
			v.SetMapIndex(k, item)
		}
	default:
		fn(path, v)
	}
}
