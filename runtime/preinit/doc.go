// Package preinit holds the parts of warden that run from C constructors,
// before the Go runtime starts, and never return to it:
//
//   - the fast path of `warden exec` (fastexec.c): a Go program starts in
//     about a millisecond and warden's package initialisation takes
//     another; the fast path sends a plain exec request to a running
//     daemon and exits with the command's status, spending neither on the
//     one call an agent makes per tool use. Every command line it does
//     not fully understand goes on to the Go CLI untouched.
//   - the sandbox agent (agent.c, landlock.c): `warden agent ...`, the PID 1
//     of every session's sandbox. In C it holds a few hundred KiB and one
//     thread, where a Go runtime held over 2 MiB and nine threads (counted
//     against the sandbox's pids limit) in every warm container.
//
// Both speak runtime/protocol.go's messages with the code in wire.c. The
// binary imports this package for its side effect; the Go functions here
// only let the tests drive the C code.
package preinit
