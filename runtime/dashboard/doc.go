// Package dashboard is warden serve: a web page of a state root's
// sessions, their running commands and audit lines, the kill switch's
// buttons, the warm pools, and /metrics in Prometheus's text format. It
// is a client of the root's daemon (daemon.Client), never part of it.
// Everything it serves is embedded in the binary; every request must come
// for the address it listens on and carry the token (or the cookie a
// sign-in with it gave), and every change a CSRF token bound to that
// cookie.
package dashboard
