package sandbox

/*
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

// userns_hold is the whole life of the process that keeps a new user
// namespace alive until its maker has its descriptor: it shares the maker's
// memory (CLONE_VM) but runs nothing of it, with every signal blocked, until
// SIGKILL. It dies with the thread that made it.
static int userns_hold(void *maker)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t)(intptr_t)maker)
		_exit(1);
	for (;;)
		pause();
	return 0;
}

// userns_start starts userns_hold on stack (size bytes) in a new user
// namespace. Signals stay blocked in the child from its first instruction:
// it has the maker's handlers, which it must never run.
static pid_t userns_start(void *stack, size_t size, int *err)
{
	sigset_t all, old;
	pid_t pid;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = clone(userns_hold, (char *)stack + size, CLONE_VM | CLONE_NEWUSER | SIGCHLD, (void *)(intptr_t)getpid());
	*err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return pid;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// usernsStack is the holder's stack: it calls prctl, getppid and pause.
const usernsStack = 64 << 10

// newUserns returns a handle on a new user namespace with the mappings,
// setgroups denied in it: a process is started in it (userns_hold, which
// runs none of warden's code), given the maps, and killed once the
// namespace has a descriptor. It neither forks warden's memory nor execs
// anything: a fork and exec of warden stopped by ptrace cost ~2.4 ms of
// every container's start under a policy.
func newUserns(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	goruntime.LockOSThread() // the holder dies with this thread
	defer goruntime.UnlockOSThread()
	stack := C.malloc(usernsStack)
	if stack == nil {
		return nil, errors.New("user namespace: out of memory")
	}
	var cerr C.int
	pid := int(C.userns_start(stack, usernsStack, &cerr))
	if pid < 0 {
		C.free(stack)
		return nil, fmt.Errorf("user namespace: clone: %w", syscall.Errno(cerr))
	}
	defer func() {
		unix.Kill(pid, unix.SIGKILL)
		for {
			if _, err := unix.Wait4(pid, nil, unix.WALL, nil); err != unix.EINTR {
				break
			}
		}
		C.free(stack) // only once the holder, which ran on it, is gone
	}()
	proc := fmt.Sprintf("/proc/%d/", pid)
	for _, w := range []struct{ file, text string }{
		{"uid_map", idMap(uids)}, {"setgroups", "deny"}, {"gid_map", idMap(gids)},
	} {
		if err := os.WriteFile(proc+w.file, []byte(w.text), 0); err != nil {
			return nil, fmt.Errorf("user namespace: %w", err)
		}
	}
	f, err := os.Open(proc + "ns/user")
	if err != nil {
		return nil, errors.Join(errors.New("user namespace"), err)
	}
	return f, nil
}

// idMap is the text of a uid_map or gid_map file.
func idMap(m []specs.LinuxIDMapping) string {
	var sb strings.Builder
	for _, x := range m {
		fmt.Fprintf(&sb, "%d %d %d\n", x.ContainerID, x.HostID, x.Size)
	}
	return sb.String()
}
