// Package runtime runs sandboxes: it probes the host, and (as warden grows)
// owns containers, sessions, the warm pool, the daemon, the egress proxy and
// the audit log; the in-sandbox agent it starts is C, in runtime/preinit. It is the only package that imports
// runc's libcontainer.
package sandbox
