package sandbox

import (
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// OnOwnThread runs f on an OS thread of its own that dies with it, so f
// may leave that thread in another process's namespaces (setns) without
// the runtime ever scheduling other code there. That thread is never the
// main one: /proc/self shows the main thread's namespaces, which must stay
// the process's (a daemon's /proc/self/mountinfo turned into a container's
// when its main thread entered one).
//
// The main goroutine is not pinned to the main thread for this (that made
// every wait of the OCI face's main goroutine a thread switch, ~3 ms of a
// `warden run`); instead the rare goroutine that finds itself on the main
// thread keeps it, untouched, while the work runs on another.
func OnOwnThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Locked here, the main thread cannot run the new goroutine.
			errc <- OnOwnThread(f)
			goruntime.UnlockOSThread()
			return
		}
		errc <- f()
		// Returning with the thread locked ends the thread.
	}()
	return <-errc
}
