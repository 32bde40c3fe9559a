// Package integration holds warden's end-to-end tests: they drive the built
// binary in temporary directories and run real containers, so they need
// root. `make integration` builds the binary and runs them; when run any
// other way they build it themselves, and they fail (never skip) when they
// cannot get what they need.
package integration
