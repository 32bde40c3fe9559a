// Package protocol is the daemon's socket protocol (docs/protocol.md):
// the request and reply types, the error codes, and the dialing of a
// state root's daemon (starting it when none answers). It is pure Go and
// imports nothing that starts containers, so the daemon, its CLI client
// and runtime/client (which builds with CGO_ENABLED=0) share one copy.
package protocol
