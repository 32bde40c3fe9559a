package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxStateFile bounds a state file warden reads back: a session's holds
// its policy (at most 1 MiB of TOML) and little else.
const maxStateFile = 16 << 20

// ReadStateFile reads one of warden's state files whole. Anything but a
// regular file is refused without waiting: a FIFO put in its place would
// hang the daemon's start for good, a device would never end. A missing
// file's error matches fs.ErrNotExist.
func ReadStateFile(path string) ([]byte, error) {
	if fi, err := os.Lstat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, notRegular(path, nil)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, notRegular(path, nil)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxStateFile {
		return nil, fmt.Errorf("%s is larger than any state file warden writes; it is damaged: remove it", path)
	}
	return data, nil
}

// WriteStateFile replaces a state file whole: written beside it, synced,
// renamed over it and its folder synced, so a crash or a full disk leaves
// the old file or the new one, never half of one, and the caller hears
// when the new one was not written.
func WriteStateFile(path string, data []byte) error {
	return writeStateFile(path, data, true)
}

// writeStateFile is WriteStateFile; without sync the file and its folder
// are not synced, which still leaves the old file or the new one after a
// crash of warden (the rename is atomic), though not after one of the
// host. For state that describes nothing a host crash would leave running.
func writeStateFile(path string, data []byte, sync bool) error {
	tmp := path + ".tmp"
	os.Remove(tmp) // a crashed save's; O_EXCL then never opens a FIFO
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !sync {
		return nil
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// RemoveContainer removes a container and everything of it: its
// processes, its libcontainer state and its cgroups in every hierarchy,
// also when that state is missing or unreadable (a start cut short by a
// crash, a damaged file), which libcontainer then knows nothing of.
func (rt *Runtime) RemoveContainer(id string) error {
	var errs []error
	if c, err := rt.engine.load(id); err == nil {
		if err := c.destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy container: %w", err))
		}
	}
	// Killing what is in the cgroups first: a process left there (the
	// agent of a container whose state is damaged) must not outlive it.
	for _, base := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
		dirs, _ := filepath.Glob(base + rt.cgroupPath(id))
		for _, dir := range dirs {
			if err := removeCgroup(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	dir := filepath.Join(rt.containersDir(), id)
	if _, err := os.Lstat(dir); err == nil {
		if !libcontainerFiles(dir) {
			errs = append(errs, fmt.Errorf("left %s: warden did not make it (it holds other files); move it out of warden's state root", dir))
		} else if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	// The uid is free once no process of the sandbox is left.
	if len(errs) == 0 {
		rt.releaseOwned(id)
	}
	return errors.Join(errs...)
}

// libcontainerFiles reports whether a container folder holds only what
// libcontainer writes there: its state, a state being saved (state-*)
// and the start FIFO.
func libcontainerFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if n := e.Name(); n != "state.json" && n != "exec.fifo" && !strings.HasPrefix(n, "state-") {
			return false
		}
	}
	return true
}
