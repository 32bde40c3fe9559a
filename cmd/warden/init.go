package main

import (
	"github.com/warden-sandbox/warden/runtime/sandbox"
	// The fast path of `warden exec` runs as a C constructor, before any
	// of this; see its package documentation.
	_ "github.com/warden-sandbox/warden/runtime/agent"
)

// init hands the process to libcontainer when it was started as a
// container's init, before the CLI parses anything. Otherwise the main
// goroutine keeps the main thread (runtime/sandbox pins it), so main runs
// the CLI on another goroutine and only waits there, once.
func init() {
	if sandbox.IsInit() {
		sandbox.Init()
	}
}
