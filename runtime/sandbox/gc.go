package sandbox

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/spec/hostfs"
	"golang.org/x/sys/unix"
)

// GC removes everything under the state root, and every warden cgroup,
// that no live session owns: sessions whose daemon lost them, containers,
// cgroups (killing what is still in them) and mounts. It says what it
// removed. Granted folders, workspaces above all, are never touched.
func (rt *Runtime) GC(live map[string]bool) ([]string, error) {
	var removed []string
	var errs []error
	// Each root's cgroups are under its own tag (see rootTag); of the
	// older layout, shared by every root, only a cgroup of an id this
	// root knows is touched, so gc under one root never kills (or
	// removes the empty cgroup of) another root's container.
	mine := map[string]bool{}
	for _, id := range rt.IDs() {
		mine[id] = true
	}
	known, _ := os.ReadDir(rt.containersDir())
	for _, e := range known {
		mine[e.Name()] = true
	}
	live = maps.Clone(live)
	for _, id := range rt.IDs() {
		if live[id] {
			continue
		}
		// A session another process runs (warden do, a Go program, a
		// create under way) is live too, its container and cgroup with it.
		hold, err := holdDir(rt.SessionDir(id), false)
		if errors.Is(err, ErrHeld) {
			live[id] = true
			continue
		}
		if !madeByWarden(rt.SessionDir(id), "session.json", "bundle", "late") {
			errs = append(errs, fmt.Errorf("left %s: warden did not make it (no session state in it); move it out of warden's state root", rt.SessionDir(id)))
		} else if err := rt.destroy(id); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", id, err))
		} else {
			removed = append(removed, "session "+id)
		}
		if hold != nil {
			hold.Close()
		}
	}
	removed = append(removed, rt.RemoveHalfMade()...)
	entries, _ := os.ReadDir(rt.containersDir())
	for _, e := range entries {
		id := e.Name()
		if live[id] {
			continue
		}
		if c, err := rt.engine.load(id); err == nil {
			if err := c.destroy(); err != nil {
				errs = append(errs, fmt.Errorf("container %s: %w", id, err))
				continue
			}
		} else if dir := filepath.Join(rt.containersDir(), id); !onlyWardens(dir, "state.json", "exec.fifo") {
			errs = append(errs, fmt.Errorf("left %s: warden did not make it (it holds other files); move it out of warden's state root", dir))
			continue
		} else if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "container "+id)
	}
	for _, dir := range rt.cgroupDirs() {
		if live[filepath.Base(dir)] {
			continue
		}
		// Under warden's parent directly (the older layout, shared by
		// every root) only the cgroups of ids this root knows are its own;
		// another root's may be a container starting right now.
		if !mine[filepath.Base(dir)] && filepath.Base(filepath.Dir(dir)) != rt.rootTag() {
			continue
		}
		if err := removeCgroup(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "cgroup "+dir)
	}
	rt.RemoveRootCgroups()
	removed = append(removed, rt.GCLeases(live)...)
	// Views and runsc's mounts go by their own rules (views.go): their
	// users may be other processes.
	gone, failed := rt.removeViews()
	removed, errs = append(removed, gone...), append(errs, failed...)
	gone, failed = rt.releaseRunsc(rt.viewsInUse())
	removed, errs = append(removed, gone...), append(errs, failed...)
	mounts := hostfs.MountsUnder(rt.Root)
	slices.Reverse(mounts) // deepest first
	for _, info := range mounts {
		m := info.Mountpoint
		_, view := hostfs.Under(m, rt.viewsDir())
		_, runsc := hostfs.Under(m, rt.runscDir())
		if view || runsc {
			continue
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			continue
		}
		removed = append(removed, "mount "+m)
	}
	return removed, errors.Join(errs...)
}

// RemoveHalfMade removes the session folders a create left half-made
// (makeHeldDir) when its process died before it renamed one into place:
// empty, and held by nobody. A daemon does it as it starts, gc too.
func (rt *Runtime) RemoveHalfMade() (removed []string) {
	entries, _ := os.ReadDir(filepath.Join(rt.Root, "sessions"))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), newDirPrefix) {
			continue
		}
		p := filepath.Join(rt.Root, "sessions", e.Name())
		hold, err := holdDir(p, false)
		if err != nil {
			continue // held: a create under way
		}
		if err := os.Remove(p); err == nil {
			removed = append(removed, "folder "+p)
		}
		hold.Close()
	}
	return removed
}

// madeByWarden reports whether a folder in the state root is warden's: it
// is empty (a start cut short) or holds one of the names warden writes
// first. gc removes no folder a user put there.
func madeByWarden(dir string, names ...string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return err == nil
	}
	for _, name := range names {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// onlyWardens reports whether a folder holds nothing but the given names.
func onlyWardens(dir string, names ...string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !slices.Contains(names, e.Name()) {
			return false
		}
	}
	return true
}

// cgroupDirs lists the container cgroups of this root in every hierarchy
// (cgroup v1 has one per controller), and those of the older layout that
// put every root's containers directly under warden's parent.
func (rt *Runtime) cgroupDirs() []string {
	var dirs []string
	var patterns []string
	for _, base := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
		patterns = append(patterns, base+cgroupParent+"/"+rt.rootTag()+"/*", base+cgroupParent+"/*")
	}
	for _, p := range patterns {
		matches, _ := filepath.Glob(p)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() && CheckID(filepath.Base(m)) == nil && !isRootTag(m) {
				dirs = append(dirs, m)
			}
		}
	}
	return dirs
}

// isRootTag reports whether a folder under warden's parent is a state
// root's (named by rootTag) rather than a container's of the older layout.
func isRootTag(dir string) bool {
	name := filepath.Base(dir)
	if filepath.Base(filepath.Dir(dir)) != filepath.Base(cgroupParent) || len(name) != 12 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// RemoveRootCgroups removes this root's own cgroup folders once empty.
func (rt *Runtime) RemoveRootCgroups() {
	for _, base := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
		matches, _ := filepath.Glob(base + cgroupParent + "/" + rt.rootTag())
		for _, m := range matches {
			unix.Rmdir(m)
		}
	}
}

// removeCgroup kills what is left in a cgroup and removes it.
func removeCgroup(dir string) error {
	for attempt := 0; attempt < 50; attempt++ {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		sleepBriefly()
	}
	return fmt.Errorf("remove cgroup %s: still busy", dir)
}

// Orphans lists the containers of this root, by libcontainer state or by
// cgroup, that nothing owns: no id in owned, no session folder (a sandbox
// another process runs, or one being made, has one before its container)
// and no pooled container's folder.
func (rt *Runtime) Orphans(owned map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	consider := func(id string) {
		if seen[id] || owned[id] || CheckID(id) != nil {
			return
		}
		seen[id] = true
		for _, dir := range []string{rt.SessionDir(id), filepath.Join(rt.PoolDir(), id)} {
			if _, err := os.Lstat(dir); err == nil {
				return
			}
		}
		out = append(out, id)
	}
	entries, _ := os.ReadDir(rt.containersDir())
	for _, e := range entries {
		consider(e.Name())
	}
	for _, dir := range rt.cgroupDirs() {
		if filepath.Base(filepath.Dir(dir)) == rt.rootTag() {
			consider(filepath.Base(dir))
		}
	}
	return out
}
