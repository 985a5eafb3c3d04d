package binlog

// mysqlJSONSpacing turns compact JSON text into the spacing MySQL itself prints for a JSON
// column (`{"a": 1, "b": [1, 2]}`: a space after every ':' and ',' outside strings), so a
// MySQL payload reaches consumers exactly as `SELECT payload` shows it. go-mysql's
// RenderJSONAsMySQLText already matches MySQL's key order and number forms but prints compact.
// The input must be valid compact JSON (no whitespace outside strings), which go-mysql emits.
func mysqlJSONSpacing(in []byte) []byte {
	out := make([]byte, 0, len(in)+len(in)/8)
	inStr, esc := false, false
	for _, c := range in {
		out = append(out, c)
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ':' || c == ',':
			out = append(out, ' ')
		}
	}
	return out
}
