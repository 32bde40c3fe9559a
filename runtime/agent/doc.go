// Package agent holds the parts of warden that run from C constructors,
// before the Go runtime starts, and never return to it: the sandbox agent
// (PID 1 of every session), the fast path of `warden exec` and the user
// namespace owner. README.md says how each starts and which file is which.
// The binary imports this package for its side effect; the Go functions
// here only let the tests drive the C code.
package agent
