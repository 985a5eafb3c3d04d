// Package doccheck reads Markdown the way GitHub renders it, as far as the docs' tests need: the
// anchors its headings get and the links a page makes. The tests of README.md, docs/ and the
// alert rules' runbook URLs use it, so that every page is checked by one set of rules.
package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Slug returns the anchor GitHub gives a heading's text: lower case, each space a hyphen, and
// every character dropped that is not a letter, a digit, a hyphen or an underscore. Inline
// Markdown is reduced to its text first (a link to its label, code spans to their content).
// Pure.
func Slug(heading string) string {
	heading = mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// heading matches an ATX heading line.
var heading = regexp.MustCompile(`^#{1,6}[ \t]+(.*?)[ \t#]*$`)

// Anchors returns the anchors of a page's headings in order, outside fenced code blocks. A
// heading whose slug appeared before gets "-1", "-2", … appended, as GitHub does. Pure.
func Anchors(markdown string) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range prose(markdown) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			out = append(out, s+"-"+strconv.Itoa(n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

// Link is an inline link of a page: its target as written and the line it is on (from 1).
type Link struct {
	Target string
	Line   int
}

// mdLink matches an inline link or image, [label](target) with an optional title; the label may
// not span brackets.
var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)

// codeSpan matches an inline code span, whose content is never a link.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// Links returns the inline links of a page outside fenced code blocks and code spans. Pure.
func Links(markdown string) []Link {
	var out []Link
	for _, l := range prose(markdown) {
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
			out = append(out, Link{Target: m[2], Line: l.n})
		}
	}
	return out
}

// line is a line of a page and its number, from 1.
type line struct {
	text string
	n    int
}

// prose returns the lines of a page outside fenced code blocks.
func prose(markdown string) []line {
	var out []line
	fence := false
	for i, text := range strings.Split(markdown, "\n") {
		if isFence(text) {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, line{text, i + 1})
		}
	}
	return out
}

func isFence(line string) bool {
	t := strings.TrimLeft(line, " ")
	return strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")
}
