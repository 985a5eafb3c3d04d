// Package layout has no code: its tests keep the module's import layout (which packages may
// import which), checked with `go list`.
package layout
