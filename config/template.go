package config

import (
	"fmt"
	"strings"
)

// TemplateVars are the values a Template can refer to.
type TemplateVars struct {
	// Topic is the row's topic column.
	Topic string
	// Schema and Table name the outbox table.
	Schema, Table string
	// EventType is the row's event_type column, "" when NULL or absent.
	EventType string
}

// placeholderList names the placeholders a template may use, for error messages.
const placeholderList = "{topic}, {schema}, {table}, {event_type}"

type placeholder uint8

const (
	literal placeholder = iota
	phTopic
	phSchema
	phTable
	phEventType
)

type templatePart struct {
	kind placeholder
	lit  string
}

// Template is a parsed destination template such as "{topic}" or "{schema}.{table}.events".
// The zero value renders "". Immutable, safe for concurrent use.
type Template struct {
	src   string
	parts []templatePart
}

// ParseTemplate parses s. Text between '{' and '}' must be one of {topic}, {schema}, {table},
// {event_type}; any other brace is an error, since no broker accepts braces in a topic or tag.
func ParseTemplate(s string) (Template, error) {
	if s == "" {
		return Template{}, fmt.Errorf("is empty; use text and placeholders %s", placeholderList)
	}
	t := Template{src: s}
	rest := s
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, templatePart{lit: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{lit: rest[:open]})
		}
		if rest[open] == '}' {
			return Template{}, fmt.Errorf("%q has an unmatched }; placeholders are %s", s, placeholderList)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("%q has an unclosed {; placeholders are %s", s, placeholderList)
		}
		name := rest[open : open+end+1]
		var kind placeholder
		switch name {
		case "{topic}":
			kind = phTopic
		case "{schema}":
			kind = phSchema
		case "{table}":
			kind = phTable
		case "{event_type}":
			kind = phEventType
		default:
			return Template{}, fmt.Errorf("%q uses unknown placeholder %s; allowed: %s", s, name, placeholderList)
		}
		t.parts = append(t.parts, templatePart{kind: kind})
		rest = rest[open+end+1:]
	}
	return t, nil
}

// Render substitutes v into the template. It never fails; the result may be empty when every
// part is a placeholder whose value is empty.
func (t Template) Render(v TemplateVars) string {
	if len(t.parts) == 1 && t.parts[0].kind == literal {
		return t.parts[0].lit
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case literal:
			b.WriteString(p.lit)
		case phTopic:
			b.WriteString(v.Topic)
		case phSchema:
			b.WriteString(v.Schema)
		case phTable:
			b.WriteString(v.Table)
		case phEventType:
			b.WriteString(v.EventType)
		}
	}
	return b.String()
}

// String returns the template's source text.
func (t Template) String() string { return t.src }
