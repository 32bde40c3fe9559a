package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrFavorNoEffect: the kernel is older than 6.18, where favordynmods
// would end with the hierarchy that asked for it.
var ErrFavorNoEffect = errors.New("favordynmods: this kernel would drop the mode with the hierarchy (Linux 6.18 keeps it); cgroup moves stay as they are")

// FavorCgroupMoves asks the kernel for cheap cgroup moves: it creates a
// cgroup v1 hierarchy with the favordynmods option and lets it go at once,
// never attached to any folder. The name is new each time: the kernel
// destroys a dropped hierarchy later, and until then its name is taken.
//
// Why: moving a process into a cgroup (libcontainer's first cgroup.procs
// write, once per sandbox start) takes the kernel's global threadgroup
// lock for writing, which waits for an RCU grace period: 4-12 ms of every
// cold create on this project's machines, the largest single step of it.
// favordynmods is the kernel's switch for hosts that move processes
// between cgroups often (also the boot parameter cgroup_favordynmods=1).
// From Linux 6.18 it makes cgroup.procs writes lock only the moved
// process's thread group, and that mode cannot be turned off again: it
// stays on until reboot after the hierarchy is gone (the kernel logs
// "cgroup favordynmods: per threadgroup rwsem mechanism can't be
// disabled" once); a move then takes under 0.1 ms. Forks, execs and exits
// take one more uncontended per-process read lock, and on kernels that
// keep the whole favordynmods mode on, the global lock's slower shared
// read path. Older kernels drop the favour with the hierarchy: nothing is
// done there (ErrFavorNoEffect).
//
// The daemon calls it once at start unless its configuration says
// cgroup_favordynmods = false.
func FavorCgroupMoves() error {
	if _, major, minor, err := kernelRelease(); err != nil {
		return err
	} else if major < 6 || (major == 6 && minor < 18) {
		return ErrFavorNoEffect
	}
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
