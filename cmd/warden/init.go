package main

import (
	goruntime "runtime"

	"github.com/warden-sandbox/warden/runtime/sandbox"
	// The fast path of `warden exec` runs as a C constructor, before any
	// of this; see its package documentation.
	_ "github.com/warden-sandbox/warden/runtime/agent"
)

// init hands the process to libcontainer when it was started as a
// container's init, before the CLI parses anything. Otherwise it pins
// the main goroutine to the main thread, so that no other goroutine ever
// runs there: code that enters a container's namespaces runs on threads
// of its own (sandbox.OnOwnThread, and libcontainer's own goroutines that
// lock a thread and setns into a container being started), and a main
// thread left in a container's mount namespace would show the container
// as /proc/self and hold its mounts for the process's life. main runs the
// CLI on another goroutine and only waits here, once.
func init() {
	if sandbox.IsInit() {
		sandbox.Init()
	}
	goruntime.LockOSThread()
}
