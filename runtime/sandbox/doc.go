// Package sandbox runs a session's life on one state root: it turns a
// policy into a container whose PID 1 is warden's agent (runtime/agent),
// starts and tears it down, warms pooled containers and binds a session's
// folders into one, runs commands through the agent, freezes, thaws and kills a
// session's processes (the kill switch), serves the session's
// egress proxy and writes the audit log. It is warden's Go API for programs
// that link it (New, Runtime.Create, Session.Exec).
package sandbox
