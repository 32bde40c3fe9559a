package runtime

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// FavorCgroupMoves asks the kernel for cheap cgroup moves: it creates a
// cgroup v1 hierarchy with the favordynmods option and lets it go at once,
// never attached to any folder. The name is new each time: the kernel
// destroys a dropped hierarchy later, and until then its name is taken.
//
// Why: moving a process into a cgroup (libcontainer's first cgroup.procs
// write, once per sandbox start) takes the kernel's global threadgroup
// lock for writing, which waits for an RCU grace period: 4-12 ms of every
// cold create on this project's machines, the largest single step of it.
// favordynmods is the kernel's documented switch for hosts that move
// processes between cgroups often. From Linux 6.18 it makes cgroup.procs
// writes lock only the moved process's thread group, and that mode stays
// on for the rest of the boot even after the hierarchy is gone; a move
// then takes under 0.1 ms. Forks and exits take one more uncontended
// per-process read lock (and, on some versions, the global lock's slower
// shared read path). On older kernels the favour ends with the
// hierarchy, so this changes nothing there.
//
// The daemon calls it once at start unless its configuration says
// cgroup_favordynmods = false.
func FavorCgroupMoves() error {
	fd, err := unix.Fsopen("cgroup", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("favordynmods: fsopen cgroup: %w", err)
	}
	defer unix.Close(fd)
	fail := func(step string, err error) error {
		return fmt.Errorf("favordynmods: cgroup hierarchy, %s: %w", step, err)
	}
	if err := unix.FsconfigSetFlag(fd, "none"); err != nil {
		return fail("none", err)
	}
	if err := unix.FsconfigSetString(fd, "name", fmt.Sprintf("warden-favordynmods-%d-%d", os.Getpid(), favorSeq.Add(1))); err != nil {
		return fail("name", err)
	}
	if err := unix.FsconfigSetFlag(fd, "favordynmods"); err != nil {
		return fail("favordynmods option (kernel older than 6.0?)", err)
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fail("create", err)
	}
	return nil
}

var favorSeq atomic.Uint64
