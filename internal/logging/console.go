package logging

import (
	"io"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// ConsoleTimeFormat is the time of day a console line starts with.
const ConsoleTimeFormat = "15:04:05.000"

// Console returns a writer that turns the JSON lines of a logger into zerolog's console
// lines on w, coloured only where colour is wanted (Colour). getenv reads the environment
// (os.Getenv). Safe for concurrent use if w is.
func Console(w io.Writer, getenv func(string) string) io.Writer {
	return zerolog.ConsoleWriter{Out: w, TimeFormat: ConsoleTimeFormat, NoColor: !Colour(w, getenv)}
}

// Colour reports whether console lines on w get ANSI colour codes: never when NO_COLOR is set
// to anything but "" (https://no-color.org), always when FORCE_COLOR is (and NO_COLOR is not),
// and otherwise only when w is a terminal, so that a pipe, a file or a journal gets plain text.
func Colour(w io.Writer, getenv func(string) string) bool {
	switch {
	case getenv("NO_COLOR") != "":
		return false
	case getenv("FORCE_COLOR") != "":
		return true
	}
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
