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

// FavorCgroupMoves asks the kernel for cheap cgroup moves (favordynmods):
// it creates a cgroup v1 hierarchy with that option and lets it go at once,
// under a new name each time (a dropped hierarchy keeps its name until the
// kernel destroys it). From Linux 6.18 the mode then stays on until reboot
// and a sandbox start's move into its cgroup no longer waits for an RCU
// grace period; docs/sessions.md has the trade-off. The daemon calls it at
// start unless its configuration says cgroup_favordynmods = false.
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
