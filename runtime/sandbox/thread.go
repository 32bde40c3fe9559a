package sandbox

import (
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// The main goroutine of every program that links this package keeps the
// main thread, so no other goroutine ever runs there: the setns work of
// OnOwnThread, and libcontainer's own goroutines that lock a thread into a
// container being started, end their threads in other namespaces, and a
// main thread left so would show the container as the process's /proc/self
// and hold its mounts (or network) for the process's life. A program that
// waits often on its main goroutine pays a thread hand-off per wait, so the
// warden CLI runs on another goroutine and its main one waits once.
func init() {
	goruntime.LockOSThread()
}

// OnOwnThread runs f on an OS thread of its own that dies with it, so f
// may leave that thread in another process's namespaces (setns) without
// the runtime ever scheduling other code there. That thread is never the
// main one: /proc/self shows the main thread's namespaces, which must stay
// the process's (a daemon's /proc/self/mountinfo turned into a container's
// when its main thread entered one).
//
// Should the main thread run it all the same (a program that unlocked its
// main goroutine), the goroutine keeps the main thread, untouched, while
// the work runs on another.
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
