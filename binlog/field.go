package binlog

// FieldOf is the one conversion from a decoded column value to a Field, for rows read over SQL
// (the backfill) as for rows read from the binlog: nil is NULL, byte and string values are taken
// as they are, numbers and times are printed as MySQL prints them. A []byte is not copied: pass
// one nothing overwrites later. Pure; safe for concurrent use.
func FieldOf(v any) Field { return valueField(v) }
