package sandbox

import (
	"errors"
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A bind mount's source is checked (symlinks resolved, system folders
// refused) when the spec is made, and mounted later by path. A sandbox
// that can write above a source (another session's workspace holding this
// one's grant) could swap a folder on that path for a symlink in between,
// and the mount would follow it anywhere, /etc included. The spec's
// sources hold no symlink, so each is opened now without following one,
// which pins the file that was checked; after the start, what each
// destination shows must be that file.

// PinnedBind is the file a bind mount's destination must show.
type PinnedBind struct {
	dest     string
	dev, ino uint64
}

// openSource opens a bind mount's source, refusing a symlink anywhere on
// its path.
func openSource(source string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, source, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s: a symlink now stands on its path (it held none when the sandbox was planned); try again", source)
	}
	return fd, err
}

// PinBinds records the file behind every bind mount's source. Each one
// is checked after the start, so a bind hidden by a later mount at the
// same place (which spec.Tighten refuses) fails the check rather than
// going unchecked.
func PinBinds(mounts []specs.Mount, skip func(source string) bool) ([]PinnedBind, error) {
	var pins []PinnedBind
	for _, m := range mounts {
		bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
		if !bind || skip(m.Source) {
			continue
		}
		fd, err := openSource(m.Source)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		pins = append(pins, PinnedBind{m.Destination, st.Dev, st.Ino})
	}
	return pins, nil
}

// CheckBinds makes sure each destination in the container of pid shows the
// pinned file, resolving destinations inside the container's root as the
// mounts were.
func CheckBinds(pid int, pins []PinnedBind) error {
	if len(pins) == 0 {
		return nil
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	for _, p := range pins {
		fd, err := unix.Openat2(root, p.dest, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("mount %s: %w", p.dest, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mount %s: %w", p.dest, err)
		}
		if st.Dev != p.dev || st.Ino != p.ino {
			return fmt.Errorf("mount %s: its source was replaced while the sandbox started (a symlink swapped onto its path); the sandbox was removed; try again", p.dest)
		}
	}
	return nil
}
