// Package runtime runs sandboxes: it probes the host, and (as warden grows)
// owns containers, sessions, the warm pool, the in-sandbox agent, the daemon,
// the egress proxy and the audit log. It is the only package that imports
// runc's libcontainer.
package runtime
